package ashlock

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A term whose lease's local deadline passed after the campaign won, but
// before the watchdog's scheduler has run to end the guard: the guard can
// no longer be trusted (guarantee 3) though nothing has told it yet, so
// hold must not call lead for it, and releases it.
func TestElectionTermSkipsLeadPastTheDeadline(t *testing.T) {
	c, err := Connect(context.Background(), LockConfig{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer c.Close(context.Background())
	ctx := t.Context()
	e := c.Election("e")
	s, err := e.lock.acquire(ctx, true)
	require.NoError(t, err)
	// Move the deadline into the past without waking the scheduler, whose
	// next tick is a renewal interval away.
	c.wd.mu.Lock()
	s.lease.deadline.Store(c.wd.now() - 1)
	c.wd.mu.Unlock()

	var tokens []uint64
	ran, err, after := s.hold(ctx, func(_ context.Context, token uint64) error {
		tokens = append(tokens, token)
		return nil
	})
	assert.Empty(t, tokens, "lead called for a term past its local deadline")
	assert.False(t, ran)
	assert.NoError(t, err)
	assert.ErrorIs(t, after, ErrLeaseExpired)
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, ErrNoLeader, "the term was not released")
}
