package memory

import (
	"context"
	"fmt"

	"github.com/ash-lock/ashlock/backend"
)

// Inspect reports key's holder (label, token, acquisition time, stamp) and
// its fair waiters in queue order. Non-fair requests waiting outside the
// queue are not listed. A free key gives Held == false and a nil error.
// Inspect does not block; it fails with ctx's error if ctx has already
// ended, and with backend.ErrClosed after Close.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	if ctx.Err() != nil {
		return backend.LockInfo{}, fmt.Errorf("memory: inspect %q: %w", key, backend.ContextError(ctx))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.LockInfo{}, errClosed("inspect")
	}
	info := backend.LockInfo{Key: key}
	k := b.keys[key]
	if k == nil || k.queue.empty() {
		return info, nil
	}
	h := k.queue.head
	info.Held = true
	info.Owner = h.owner
	info.Token = h.token
	info.AcquiredAt = h.acquiredAt
	info.Stamp = h.stamp
	for w := h.inKey.next; w != nil; w = w.inKey.next {
		info.Waiters = append(info.Waiters, backend.Waiter{Owner: w.owner, Token: w.token})
	}
	return info, nil
}
