package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Inspect reports the state of key with one read of its queue: the oldest
// claim is the holder (owner label, token, acquired-at and stamp from its
// record), the others are the waiters in queue order. Requests with Fair
// false wait outside the queue and are not listed. A free key gives
// Held == false and a nil error.
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
	info := backend.LockInfo{Key: key}
	for i, kv := range resp.Kvs {
		rec, err := decodeClaim(kv.Value)
		if err != nil {
			return backend.LockInfo{}, fmt.Errorf("etcd inspect %q: claim %s: %w", key, kv.Key, err)
		}
		if i == 0 {
			info.Held = true
			info.Owner = rec.Owner
			info.Token = uint64(kv.CreateRevision)
			info.AcquiredAt = rec.AcquiredAt
			info.Stamp = rec.Stamp
			continue
		}
		info.Waiters = append(info.Waiters, backend.Waiter{Owner: rec.Owner, Token: uint64(kv.CreateRevision)})
	}
	return info, nil
}
