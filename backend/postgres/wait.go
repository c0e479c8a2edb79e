package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// expirySlack is added to a blocker's remaining lease time, so that the
// timer fires after the server's clock has passed expires_at.
const expirySlack = time.Millisecond

// wait blocks until something in s may have changed the claim's standing,
// without polling: an event of a claim s waits for (its delete, its
// admission, or our own claim's delete), the expiry of such a claim's
// lease by the server's clock (the lease is then deleted, which frees the
// claim's place), or a reconnection of the listener. It returns nil when
// the caller should read the queues again, and an error when ctx ends or
// the Backend closes.
func (a *acquisition) wait(ctx context.Context, s standing) error {
	if a.b.hub.arm(a.w, s.want) {
		return nil // an event came while the queues were read
	}
	var expired []int64
	soonest := time.Duration(-1)
	for _, r := range s.blockers {
		if r.remaining <= 0 {
			expired = append(expired, r.lease)
		} else if soonest < 0 || r.remaining < soonest {
			soonest = r.remaining
		}
	}
	if len(expired) > 0 {
		return a.reap(ctx, expired)
	}
	var expiry <-chan time.Time
	if soonest >= 0 {
		t := time.NewTimer(soonest + expirySlack)
		defer t.Stop()
		expiry = t.C
	}
	select {
	case <-a.w.wake:
		return nil
	case <-expiry:
		leases := make([]int64, len(s.blockers))
		for i, r := range s.blockers {
			leases[i] = r.lease
		}
		return a.reap(ctx, leases)
	case <-ctx.Done():
		return fmt.Errorf("postgres acquire %q: waiting: %w", a.req.Key, backend.ContextError(ctx))
	case <-a.b.done:
		return closedError("acquire")
	}
}

// reap deletes those of leases that have expired by the server's clock,
// with their claims. It waits for a transaction that fenced a write with
// one of them (see Fence): until that ends, the claim still holds.
func (a *acquisition) reap(ctx context.Context, leases []int64) error {
	return a.retry(ctx, "reap", func() error {
		_, err := a.b.pool.Exec(ctx, a.b.sql.reapExpired, leases)
		return err
	})
}
