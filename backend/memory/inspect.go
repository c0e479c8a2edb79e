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

// stateOf is what Inspect reports of k (see backend.Describe), with the
// waiters only if waiters (observers are not told about them). Values are
// copied: the store replaces a claim's value, and a copy keeps callers away
// from its memory. b.mu held.
func stateOf(k *keyState, waiters bool) backend.LockInfo {
	// Most queues are short: their claims are listed without allocating.
	var buf [8]backend.Queued
	q := buf[:0]
	// The claims that can hold the key are a prefix of the queue (its free
	// entries); without waiters there is nothing to look at past it.
	for e := k.queue.head; e != nil && (waiters || e.free); e = e.next {
		c := e.c
		permit := backend.NoPermit
		if c.state == stateHolding {
			permit = int(c.permit)
		}
		q = append(q, backend.Queued{
			Kind:       backend.Kind{Shared: c.shared, Permits: int(c.permits)},
			Token:      c.token,
			Admitted:   c.state == stateHolding,
			Permit:     permit,
			Owner:      c.owner,
			Value:      c.value(),
			AcquiredAt: c.acquiredAt,
			Stamp:      c.stamp,
		})
	}
	info := backend.Describe(k.name, q, waiters)
	for i := range info.Holders {
		info.Holders[i].Value = bytes.Clone(info.Holders[i].Value)
	}
	return info
}
