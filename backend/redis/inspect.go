package redis

import (
	"context"
	"fmt"
	"iter"
	"time"

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
	qs, err := b.queues(ctx, []string{key}, "+inf")
	if err != nil {
		return backend.LockInfo{}, err
	}
	return describe(key, qs[0], true), nil
}

// Observe yields the state of key first, then a new state after each
// change of its holders. It reads the key again after every event of the
// key, at the end of the earliest of its holders' leases (so a holder
// whose lease runs out is seen to go even if nobody reaps it), and after
// the subscription was restored (events may have been missed; the state
// read then is the current one, changes in the gap may be merged, never
// reordered). It never polls. The sequence ends when ctx ends; when the
// Backend is closed it yields an error wrapping ErrClosed once and ends.
// While Redis cannot be reached it retries every second.
func (b *Backend) Observe(ctx context.Context, key string) iter.Seq2[backend.LockInfo, error] {
	return func(yield func(backend.LockInfo, error) bool) {
		if err := b.closedErr("observe"); err != nil {
			yield(backend.LockInfo{}, err)
			return
		}
		if err := backend.CheckKey(key); err != nil {
			yield(backend.LockInfo{}, err)
			return
		}
		w := b.reg.watch([]string{key}, true)
		defer b.reg.unwatch(w)
		var last *backend.LockInfo
		for {
			b.reg.disarm(w)
			var s standing
			s.soon = -1
			qs, err := b.queues(ctx, []string{key}, "+inf")
			switch {
			case ctx.Err() != nil:
				return
			case b.closedErr("observe") != nil:
				yield(backend.LockInfo{}, b.closedErr("observe"))
				return
			case err != nil:
				s.soon = time.Second
			default:
				info := describe(key, qs[0], false)
				if last == nil || !backend.SameHolders(*last, info) {
					if !yield(info, nil) {
						return
					}
					last = &info
				}
				for _, h := range qs[0] {
					if h.admitted {
						s.add(key, h, false)
					}
				}
			}
			if b.reg.arm(w, nil, s.leases) {
				if err := b.observeSleep(ctx, w, s.soon); err != nil {
					if ctx.Err() == nil {
						yield(backend.LockInfo{}, err)
					}
					return
				}
			}
		}
	}
}

// observeSleep waits for w's next event, for soon (if not negative), for
// ctx's end or for Close (the error).
func (b *Backend) observeSleep(ctx context.Context, w *watcher, soon time.Duration) error {
	var expiry <-chan time.Time
	if soon >= 0 {
		t := time.NewTimer(soon + time.Millisecond)
		defer t.Stop()
		expiry = t.C
	}
	select {
	case <-w.wake:
	case <-expiry:
	case <-ctx.Done():
		return fmt.Errorf("redis observe: %w", ctx.Err())
	case <-b.done:
		return b.closedErr("observe")
	}
	return nil
}
