package benchrun_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// A holder's channel closes at the next acquisition, not before.
func TestSuccessionTaken(t *testing.T) {
	var s benchrun.Succession
	first := s.Taken()
	select {
	case <-first:
		t.Fatal("closed before anyone else took the lock")
	default:
	}
	second := s.Taken()
	select {
	case <-first:
	default:
		t.Fatal("not closed when the next contender took the lock")
	}
	select {
	case <-second:
		t.Fatal("the new holder's channel is closed already")
	default:
	}
}

func TestWaitQueued(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ashlock.Connect(ctx, ashlock.LockConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close(context.Background())) })

	release, err := benchrun.Acquire(c.Lock("k"))(ctx)
	require.NoError(t, err)

	t.Run("no waiter, until ctx ends", func(t *testing.T) {
		short, stop := context.WithTimeout(ctx, 20*time.Millisecond)
		defer stop()
		assert.ErrorIs(t, benchrun.WaitQueued(short, c, "k", 1), context.DeadlineExceeded)
	})

	t.Run("one waiter", func(t *testing.T) {
		got := make(chan error, 1)
		go func() {
			rel, err := benchrun.Acquire(c.Lock("k"))(ctx)
			if err == nil {
				err = rel(ctx)
			}
			got <- err
		}()
		require.NoError(t, benchrun.WaitQueued(ctx, c, "k", 1))
		require.NoError(t, release(ctx))
		select {
		case err := <-got:
			require.NoError(t, err, "the waiter")
		case <-ctx.Done():
			t.Fatal("the waiter never took the lock")
		}
	})
}

// fakeLock is a Take that counts acquisitions and releases and fails
// where told to.
type fakeLock struct {
	taken, released int
	takeErr         func(n int) error // the error of the n-th acquisition (from 1)
	releaseErr      error
}

func (l *fakeLock) take(ctx context.Context) (func(context.Context) error, error) {
	l.taken++
	if l.takeErr != nil {
		if err := l.takeErr(l.taken); err != nil {
			return nil, err
		}
	}
	return func(context.Context) error {
		l.released++
		return l.releaseErr
	}, nil
}

func TestContend(t *testing.T) {
	boom := errors.New("boom")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("released after held, until held says no more", func(t *testing.T) {
		var l fakeLock
		failed := make(chan error, 1)
		held := 0
		benchrun.Contend(ctx, ctx, l.take, failed, func() (<-chan struct{}, bool) {
			held++
			assert.Equal(t, held, l.taken, "held while holding")
			assert.Equal(t, held-1, l.released, "held before the release")
			return nil, held < 3
		})
		assert.Equal(t, 3, l.taken)
		assert.Equal(t, 3, l.released)
		assert.Empty(t, failed)
	})

	t.Run("a take's error goes to failed", func(t *testing.T) {
		l := fakeLock{takeErr: func(n int) error {
			if n == 2 {
				return boom
			}
			return nil
		}}
		failed := make(chan error, 1)
		benchrun.Contend(ctx, ctx, l.take, failed, func() (<-chan struct{}, bool) { return nil, true })
		require.Len(t, failed, 1)
		assert.ErrorIs(t, <-failed, boom)
		assert.Equal(t, 1, l.released)
	})

	t.Run("a take's error once ctx has ended does not", func(t *testing.T) {
		stopped, stop := context.WithCancel(ctx)
		l := fakeLock{takeErr: func(n int) error {
			if n == 2 {
				stop()
				return context.Canceled
			}
			return nil
		}}
		failed := make(chan error, 1)
		benchrun.Contend(stopped, ctx, l.take, failed, func() (<-chan struct{}, bool) { return nil, true })
		assert.Empty(t, failed)
		assert.Equal(t, 2, l.taken)
	})

	t.Run("a release's error goes to failed", func(t *testing.T) {
		l := fakeLock{releaseErr: boom}
		failed := make(chan error, 1)
		benchrun.Contend(ctx, ctx, l.take, failed, func() (<-chan struct{}, bool) { return nil, true })
		require.Len(t, failed, 1)
		assert.ErrorIs(t, <-failed, boom)
		assert.Equal(t, 1, l.taken)
	})

	t.Run("released with base after ctx ends, then no more", func(t *testing.T) {
		stopped, stop := context.WithCancel(ctx)
		var l fakeLock
		var releasedWith error
		take := func(c context.Context) (func(context.Context) error, error) {
			_, err := l.take(c)
			return func(c context.Context) error { releasedWith = c.Err(); return nil }, err
		}
		failed := make(chan error, 1)
		benchrun.Contend(stopped, ctx, take, failed, func() (<-chan struct{}, bool) {
			stop()
			return make(chan struct{}), true // never closed: only ctx's end lets it go
		})
		assert.NoError(t, releasedWith, "the release's context")
		assert.Equal(t, 1, l.taken)
		assert.Empty(t, failed)
	})

	t.Run("asks again once wait is closed", func(t *testing.T) {
		var l fakeLock
		failed := make(chan error, 1)
		waits := make(chan chan struct{}, 2)
		done := make(chan struct{})
		go func() {
			defer close(done)
			benchrun.Contend(ctx, ctx, l.take, failed, func() (<-chan struct{}, bool) {
				w := make(chan struct{})
				waits <- w
				return w, len(waits) < 2 && l.taken < 2
			})
		}()
		var first chan struct{}
		select {
		case first = <-waits:
		case <-ctx.Done():
			t.Fatal("never held")
		}
		select {
		case <-waits:
			t.Fatal("asked again before wait was closed")
		case <-time.After(10 * time.Millisecond):
		}
		close(first)
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("never returned")
		}
		assert.Equal(t, 2, l.taken)
		assert.Empty(t, failed)
	})
}

func TestAwait(t *testing.T) {
	boom := errors.New("boom")
	closed := make(chan struct{})
	close(closed)
	ended, end := context.WithCancel(context.Background())
	end()
	assert.NoError(t, benchrun.Await(context.Background(), closed, nil, "run"))
	failed := make(chan error, 1)
	failed <- boom
	assert.ErrorIs(t, benchrun.Await(context.Background(), make(chan struct{}), failed, "run"), boom)
	assert.ErrorContains(t, benchrun.Await(ended, make(chan struct{}), nil, "handoff"), "handoff: run timed out")
}
