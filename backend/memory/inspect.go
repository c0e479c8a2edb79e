package memory

import (
	"bytes"
	"context"
	"fmt"

	"github.com/ash-lock/ashlock/backend"
)

// Inspect reports key's holders, oldest first (label, token, permit, kind,
// value, acquisition time, stamp), with the oldest one's also in the
// top-level fields, the permit count its claims agree on, and the claims
// queued behind, in queue order: every claim in the queue that does not
// hold all its keys yet. A multi-key claim appears at each of its keys.
// Non-fair requests waiting outside the queue are not listed. A free key
// gives Held == false and a nil error. Values are copies. Inspect does not
// block; it fails with ctx's error if ctx has already ended, and with
// backend.ErrClosed after Close.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	if ctx.Err() != nil {
		return backend.LockInfo{}, fmt.Errorf("memory: inspect %q: %w", key, backend.ContextError(ctx))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.LockInfo{}, errClosed("inspect")
	}
	k := b.keys[key]
	if k == nil {
		return backend.LockInfo{Key: key}, nil
	}
	return stateOf(k, true), nil
}

// stateOf is what Inspect reports of k, with the waiters only if waiters
// (observers are not told about them). Values are copied: the store
// replaces a claim's value, and a copy keeps callers away from its memory.
// b.mu held.
func stateOf(k *keyState, waiters bool) backend.LockInfo {
	info := backend.LockInfo{Key: k.name}
	if k.queue.empty() {
		return info
	}
	info.Permits = int(k.permits)
	// The claims that can hold the key are a prefix of the queue (its free
	// entries); without waiters there is nothing to look at past it.
	for e := k.queue.head; e != nil && (waiters || e.free); e = e.next {
		c := e.c
		if c.state != stateHolding {
			// A waiter, or a multi-key claim still waiting at another key.
			if waiters {
				info.Waiters = append(info.Waiters, backend.Waiter{Owner: c.owner, Token: c.token, Shared: c.shared})
			}
			continue
		}
		info.Holders = append(info.Holders, backend.Holder{
			Owner:      c.owner,
			Token:      c.token,
			Permit:     int(c.permit),
			Shared:     c.shared,
			Value:      bytes.Clone(c.value()),
			AcquiredAt: c.acquiredAt,
			Stamp:      c.stamp,
		})
	}
	if len(info.Holders) > 0 {
		h := info.Holders[0]
		info.Held = true
		info.Owner, info.Token, info.AcquiredAt, info.Stamp = h.Owner, h.Token, h.AcquiredAt, h.Stamp
	}
	return info
}
