package ashlock

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Once the lease's local deadline has passed, the context Do and
// Election.Run hand to their function reports its end at the first look,
// before the watchdog's timer has run, with cause ErrLeaseExpired, and
// its Done channel is closed by then.
func TestFunctionContextEndsAtTheDeadlineBeforeTheSchedulerRuns(t *testing.T) {
	pastDeadline := func(c *LockClient, l *lease) {
		// Move the deadline into the past without waking the scheduler,
		// whose next tick is a renewal interval away.
		c.wd.mu.Lock()
		l.deadline.Store(c.wd.now() - 1)
		c.wd.mu.Unlock()
	}
	check := func(t *testing.T, c *LockClient, ctx context.Context) {
		require.NoError(t, ctx.Err(), "the context while the guard is valid")
		var l *lease
		c.wd.mu.Lock()
		for _, p := range c.wd.mu.pool {
			l = p
		}
		c.wd.mu.Unlock()
		require.NotNil(t, l)
		pastDeadline(c, l)
		require.ErrorIs(t, ctx.Err(), context.Canceled, "Err past the deadline")
		assert.ErrorIs(t, context.Cause(ctx), ErrLeaseExpired)
		select {
		case <-ctx.Done():
		default:
			t.Error("Done not closed once Err reported the end")
		}
	}

	t.Run("Do", func(t *testing.T) {
		c, err := Connect(t.Context(), LockConfig{})
		require.NoError(t, err)
		defer c.Close(context.Background())
		err = c.Lock("k").Do(t.Context(), func(ctx context.Context, _ uint64) error {
			check(t, c, ctx)
			return nil
		})
		assert.ErrorIs(t, err, ErrLeaseExpired, "Do's result when the guard ended during fn")
	})
	t.Run("Run", func(t *testing.T) {
		c, err := Connect(t.Context(), LockConfig{})
		require.NoError(t, err)
		defer c.Close(context.Background())
		ctx, stop := context.WithCancel(t.Context())
		err = c.Election("e").Run(ctx, nil, func(lctx context.Context, _ uint64) error {
			check(t, c, lctx)
			stop()
			return nil
		})
		assert.ErrorIs(t, err, context.Canceled)
	})
}
