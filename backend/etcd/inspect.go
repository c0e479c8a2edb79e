package etcd

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Inspect reports the state of key with one read of its queue; see
// queueState for who holds. Requests with Fair false wait outside the
// queue and are not listed. A free key gives Held == false and a nil
// error.
//
// Failures wrap backend.ErrUnavailable (joined with ctx.Err() if ctx ended
// first), or ErrBadRecord if a claim's value was not written by this
// package. Safe for concurrent use.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	if err := b.closed("inspect"); err != nil {
		return backend.LockInfo{}, err
	}
	resp, err := b.cli.Get(ctx, b.layout.dir(key),
		clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return backend.LockInfo{}, rpcError(ctx, "inspect", err)
	}
	return queueState("inspect", key, resp.Kvs, true)
}

// queueState computes the LockInfo of key from the claims of its queue
// directory, kvs, sorted by create revision, for Inspect and Observe
// alike: it hands them to backend.Describe, which applies the queue rule.
// A counted claim's recorded permit is its admission; a claim of another
// kind is admitted once the rule admits it. Waiters are listed only if
// waiters is set. A claim whose record does not decode fails it with an
// error wrapping ErrBadRecord, naming op.
func queueState(op, key string, kvs []*mvccpb.KeyValue, waiters bool) (backend.LockInfo, error) {
	q := make([]backend.Queued, len(kvs))
	for i, kv := range kvs {
		k := kindOfName(string(kv.Key))
		rec, err := decodeClaim(kv.Value, k)
		if err != nil {
			return backend.LockInfo{}, fmt.Errorf("etcd %s %q: claim %s: %w", op, key, kv.Key, err)
		}
		q[i] = backend.Queued{
			Kind: k, Token: uint64(kv.CreateRevision), Admitted: !k.Counted() || rec.Permit != backend.NoPermit,
			Permit: rec.Permit, Owner: rec.Owner, Value: rec.Value, AcquiredAt: rec.AcquiredAt, Stamp: rec.Stamp,
		}
	}
	return backend.Describe(key, q, waiters), nil
}
