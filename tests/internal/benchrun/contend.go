package benchrun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ash-lock/ashlock"
)

// Take takes a lock, blocking until it is held or ctx ends, and returns
// the function that gives it back.
type Take func(ctx context.Context) (release func(context.Context) error, err error)

// Acquire is lock's Acquire as a Take, released by the guard's Unlock.
func Acquire(lock *ashlock.LockBuilder) Take {
	return func(ctx context.Context) (func(context.Context) error, error) {
		g, err := lock.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return g.Unlock, nil
	}
}

// Contend takes the lock with take and gives it back, over and over,
// until ctx ends. After each acquisition, while it holds the lock, it
// calls held; then it releases with base, not ctx, so that a holder still
// gives the lock back once ctx has ended. If held returned more, it asks
// again once wait is closed (at once if wait is nil); otherwise it
// returns. An error of take while ctx lasts, or of a release, goes to
// failed, which must have room for it, and ends Contend.
func Contend(ctx, base context.Context, take Take, failed chan<- error, held func() (wait <-chan struct{}, more bool)) {
	for ctx.Err() == nil {
		release, err := take(ctx)
		if err != nil {
			if ctx.Err() == nil {
				failed <- err
			}
			return
		}
		wait, more := held()
		if err := release(base); err != nil {
			failed <- err
			return
		}
		if !more {
			return
		}
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
				return
			}
		}
	}
}

// Await waits until ch is closed and returns nil, or returns the first
// error from failed, or an error naming what once ctx ends.
func Await(ctx context.Context, ch <-chan struct{}, failed <-chan error, what string) error {
	select {
	case <-ch:
		return nil
	case err := <-failed:
		return err
	case <-ctx.Done():
		return errors.New(what + ": run timed out")
	}
}

// Succession tells a contender when someone else has taken the lock after
// it. Its zero value is ready to use; it is safe for concurrent use.
type Succession struct {
	mu sync.Mutex
	ch chan struct{}
}

// Taken records an acquisition: it closes the channel handed to the
// previous holder and returns a fresh one, closed at the next acquisition.
// Only the holder may call it: nobody else can take the lock before the
// holder releases it, so the next close of the channel it gets is another
// contender's acquisition.
func (s *Succession) Taken() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
	}
	s.ch = make(chan struct{})
	return s.ch
}

// queuePoll is how often WaitQueued reads the queue.
const queuePoll = time.Millisecond

// WaitQueued reads key's queue through c until n claims wait in it, and
// returns nil then; it returns the error of a read, or an error wrapping
// ctx's once ctx ends.
func WaitQueued(ctx context.Context, c *ashlock.LockClient, key string, n int) error {
	for {
		info, err := c.Inspect(ctx, key)
		if err != nil {
			return fmt.Errorf("inspect: %w", err)
		}
		if len(info.Waiters) == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d waiters queued, not %d: %w", len(info.Waiters), n, ctx.Err())
		case <-time.After(queuePoll):
		}
	}
}
