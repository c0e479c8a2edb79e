package ashlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Guarantee 3 at the instant itself: once the lease's local deadline has
// passed, FencingToken, Claim and Err refuse even though the scheduler has
// not run yet to end the guard. Acquire relies on this instead of reading
// the clock itself.
func TestDeadlineRefusesBeforeTheSchedulerRuns(t *testing.T) {
	c, err := Connect(context.Background(), LockConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	g, err := c.Lock("k").Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.FencingToken(); err != nil {
		t.Fatalf("FencingToken of a fresh guard: %v", err)
	}
	// Move the deadline into the past without waking the scheduler, whose
	// next tick is a renewal interval away.
	c.wd.mu.Lock()
	g.s.lease.deadline.Store(c.wd.now() - 1)
	c.wd.mu.Unlock()

	if _, err := g.FencingToken(); !errors.Is(err, ErrLeaseExpired) {
		t.Errorf("FencingToken past the deadline: %v, want ErrLeaseExpired", err)
	}
	if _, err := g.Claim(); !errors.Is(err, ErrLeaseExpired) {
		t.Errorf("Claim past the deadline: %v, want ErrLeaseExpired", err)
	}
	if err := g.Err(); !errors.Is(err, ErrLeaseExpired) {
		t.Errorf("Err past the deadline: %v, want ErrLeaseExpired", err)
	}
}

// Unlock past the deadline, before the scheduler has run, reports the loss
// (every time) as it would a moment later, and still frees the key.
func TestUnlockPastTheDeadlineReportsTheLoss(t *testing.T) {
	c, err := Connect(context.Background(), LockConfig{})
	require.NoError(t, err)
	defer c.Close(context.Background())
	g, err := c.Lock("k").Acquire(t.Context())
	require.NoError(t, err)
	c.wd.mu.Lock()
	g.s.lease.deadline.Store(c.wd.now() - 1)
	c.wd.mu.Unlock()

	require.ErrorIs(t, g.Unlock(t.Context()), ErrLeaseExpired)
	require.ErrorIs(t, g.Unlock(t.Context()), ErrLeaseExpired, "a second Unlock")
	require.ErrorIs(t, g.Err(), ErrLeaseExpired)
	info, err := c.Inspect(t.Context(), "k")
	require.NoError(t, err)
	assert.False(t, info.Held, "the key after Unlock")
}

// A renewal acknowledged after the deadline passed does not make the
// lease trusted again: its guards, which have refused their tokens since
// the deadline, stay refused and are ended.
func TestLateRenewalDoesNotRevive(t *testing.T) {
	c, err := Connect(context.Background(), LockConfig{})
	require.NoError(t, err)
	defer c.Close(context.Background())
	g, err := c.Lock("k").Acquire(t.Context())
	require.NoError(t, err)
	l := g.s.lease
	// A renewal is in flight when the deadline passes; the scheduler has
	// not run since.
	c.wd.mu.Lock()
	l.renewing = true
	l.deadline.Store(c.wd.now() - 1)
	c.wd.mu.Unlock()
	_, err = g.FencingToken()
	require.ErrorIs(t, err, ErrLeaseExpired)

	ctx, cancel := context.WithCancel(t.Context())
	c.wd.renew(ctx, cancel, l) // the store answers: renewed
	_, err = g.FencingToken()
	require.ErrorIs(t, err, ErrLeaseExpired, "after the late answer")
	select {
	case <-g.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the guard was not ended after the late answer")
	}
	require.ErrorIs(t, g.Err(), ErrLeaseExpired)
}
