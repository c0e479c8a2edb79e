package ashlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
)

// hangingRevoke stands for a remote store that never answers a Revoke: the
// call returns only when its context ends. Everything else goes to a
// memory backend.
type hangingRevoke struct {
	backend.Backend
	revokes atomic.Int32
}

func (h *hangingRevoke) Revoke(ctx context.Context, _ backend.LeaseID) error {
	h.revokes.Add(1)
	<-ctx.Done()
	return errors.Join(backend.ErrUnavailable, ctx.Err())
}

// closeAfterAcquire holds a lock on a client of a store that never answers
// a revoke, closes the client with ctx, and returns Close's error and how
// long it took by the bubble's clock.
func closeAfterAcquire(t *testing.T, ctx context.Context) (*hangingRevoke, time.Duration, error) {
	h := &hangingRevoke{Backend: bubbleBackend(t)}
	c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{DefaultTTL: wdTTL, Logger: quiet}, h)
	require.NoError(t, err)
	g, err := c.Lock("k").Acquire(t.Context())
	require.NoError(t, err)
	start := time.Now()
	err = c.Close(ctx)
	took := time.Since(start)
	assert.ErrorIs(t, g.Err(), ashlock.ErrUnlocked, "Close ends every guard")
	return h, took, err
}

func TestCloseReturnsWhenItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		h, took, err := closeAfterAcquire(t, ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, int32(1), h.revokes.Load(), "Close tries to revoke the lease")
		assert.Equal(t, 100*time.Millisecond, took, "Close outlasted its context")
	})
}

func TestCloseOnEndedContextStillTriesToRevoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		h, took, err := closeAfterAcquire(t, ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, ashlock.ErrUnavailable, "the revoke that got no answer is reported")
		assert.Equal(t, int32(1), h.revokes.Load(), "a Close after its context ended still revokes")
		assert.Positive(t, took, "the revoke had a bounded time of its own")
		assert.Less(t, took, time.Minute)
	})
}
