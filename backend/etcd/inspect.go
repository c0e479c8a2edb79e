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
// directory, kvs, sorted by create revision. It is the one statement of
// who holds, for Inspect and Observe alike, and follows the rule
// acquisition follows: an exclusive claim holds at the head of the queue,
// a shared claim when no non-shared claim is older, a counted claim among
// the first n once it has recorded its permit. The other claims are the
// waiters, in queue order, listed only if waiters is set (Observe reports
// holders only). Owner, Token, AcquiredAt and Stamp are those of the
// oldest holder. A claim whose record does not decode fails it with an
// error wrapping ErrBadRecord, naming op.
func queueState(op, key string, kvs []*mvccpb.KeyValue, waiters bool) (backend.LockInfo, error) {
	info := backend.LockInfo{Key: key}
	nonShared := false // a non-shared claim was seen
	for i, kv := range kvs {
		rec, err := decodeClaim(kv.Value)
		if err != nil {
			return backend.LockInfo{}, fmt.Errorf("etcd %s %q: claim %s: %w", op, key, kv.Key, err)
		}
		k := kindOfName(string(kv.Key))
		if i == 0 {
			info.Permits = k.n
		}
		var holds bool
		switch {
		case k.shared:
			holds = !nonShared
		case k.counted():
			holds = i < k.n && rec.Permit != noPermit
		default:
			holds = i == 0
		}
		nonShared = nonShared || !k.shared
		token := uint64(kv.CreateRevision)
		if !holds {
			if waiters {
				info.Waiters = append(info.Waiters, backend.Waiter{Owner: rec.Owner, Token: token, Shared: k.shared})
			}
			continue
		}
		info.Holders = append(info.Holders, backend.Holder{
			Owner: rec.Owner, Token: token, Permit: max(rec.Permit, 0), Shared: k.shared,
			Value: rec.Value, AcquiredAt: rec.AcquiredAt, Stamp: rec.Stamp,
		})
	}
	if len(info.Holders) > 0 {
		h := info.Holders[0]
		info.Held, info.Owner, info.Token, info.AcquiredAt, info.Stamp = true, h.Owner, h.Token, h.AcquiredAt, h.Stamp
	}
	return info, nil
}
