package redis

import (
	"context"

	"github.com/ash-lock/ashlock/backend"
)

// Inspect reports the state of key: its holders and waiters, read (after
// reaping the claims of ended leases) in one script run. A free key gives
// Held false and a nil error.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	if err := b.closedErr("inspect"); err != nil {
		return backend.LockInfo{}, err
	}
	if err := backend.CheckKey(key); err != nil {
		return backend.LockInfo{}, err
	}
	qs, _, err := b.queues(ctx, []string{key}, "+inf")
	if err != nil {
		return backend.LockInfo{}, err
	}
	return describe(key, qs[0], true), nil
}
