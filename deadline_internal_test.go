package ashlock

import (
	"context"
	"errors"
	"testing"
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
