package ashlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// With a 1s TTL the margin is max(100ms, TTL/10) = 100ms and the default
// renewal interval a third of the TTL.
const (
	wdTTL    = time.Second
	wdMargin = 100 * time.Millisecond
)

var errInjected = errors.New("injected renewal failure")

// bubbleClient makes a memory backend and a client inside the current
// synctest bubble, so that their timers run on the bubble's fake clock.
func bubbleClient(t *testing.T) (*ashlock.LockClient, *memory.Backend) {
	t.Helper()
	b := memory.New()
	c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{DefaultTTL: wdTTL, Logger: quiet}, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		_ = b.Close()
	})
	return c, b
}

// acquireMany takes keys k0..k(n-1) on c and returns the guards and the
// lease they share.
func acquireMany(t *testing.T, c *ashlock.LockClient, n int) ([]*ashlock.Guard, backend.LeaseID) {
	t.Helper()
	var guards []*ashlock.Guard
	for i := range n {
		g, err := c.Lock(fmt.Sprint("k", i)).Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		guards = append(guards, g)
	}
	claim, err := guards[0].Claim()
	if err != nil {
		t.Fatal(err)
	}
	return guards, claim.Lease
}

func TestRenewalsKeepGuardValidPastManyTTLs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := bubbleClient(t)
		g, err := c.Lock("k").Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * wdTTL)
		if err := g.Err(); err != nil {
			t.Fatalf("after 20 TTLs of successful renewals Err = %v, want nil", err)
		}
		if d := time.Until(g.Deadline()); d <= 0 || d > wdTTL-wdMargin {
			t.Errorf("deadline %v ahead, want in (0, TTL-margin]", d)
		}
	})
}

func TestFailedRenewalsPoisonAtLocalDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, b := bubbleClient(t)
		start := time.Now()
		g, err := c.Lock("k").Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		b.FailRenewals(errInjected)
		<-g.Done()
		// No renewal was ever acknowledged, so the guard must end at
		// grant send time + TTL - margin, not earlier and not later.
		if got, want := time.Since(start), wdTTL-wdMargin; got != want {
			t.Errorf("poisoned after %v, want exactly %v", got, want)
		}
		if err := g.Err(); !errors.Is(err, ashlock.ErrLeaseExpired) {
			t.Errorf("Err = %v, want ErrLeaseExpired", err)
		}
		if _, err := g.FencingToken(); !errors.Is(err, ashlock.ErrLeaseExpired) {
			t.Errorf("FencingToken = %v, want ErrLeaseExpired", err)
		}
	})
}

func TestDeadlineCountsFromLastAcknowledgedSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, b := bubbleClient(t)
		g, err := c.Lock("k").Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		// Let several renewals succeed, then fail all later ones.
		time.Sleep(2 * wdTTL)
		b.FailRenewals(errInjected)
		lastOK := g.Deadline()
		<-g.Done()
		if now := time.Now(); !now.Equal(lastOK) {
			t.Errorf("poisoned at %v, want the deadline of the last acknowledged renewal %v", now, lastOK)
		}
	})
}

func TestHangingRenewalStillPoisonsBeforeStoreExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, b := bubbleClient(t)
		other := bubbleClientOn(t, b)
		start := time.Now()
		g, err := c.Lock("k").Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		b.DelayRenewals(time.Hour) // every renewal hangs
		type seen struct {
			at       time.Time
			firstErr error
		}
		got := make(chan seen, 1)
		go func() {
			// A long TTL: this waiter's own renewals hang too.
			g2, err := other.Lock("k").WithTTL(100 * wdTTL).Acquire(t.Context())
			if err != nil {
				t.Errorf("second Acquire: %v", err)
				close(got)
				return
			}
			got <- seen{time.Now(), g.Err()}
			_ = g2.Unlock(context.Background())
		}()
		<-g.Done()
		if got, limit := time.Since(start), wdTTL-wdMargin; got > limit {
			t.Errorf("poisoned %v after the grant, later than TTL - margin = %v", got, limit)
		}
		s, ok := <-got
		if !ok {
			return
		}
		if !errors.Is(s.firstErr, ashlock.ErrLeaseExpired) {
			t.Errorf("when the second client acquired, the first guard's Err was %v, want ErrLeaseExpired", s.firstErr)
		}
		b.DelayRenewals(0)
	})
}

// bubbleClientOn makes a client on an existing backend, which the caller
// closes.
func bubbleClientOn(t *testing.T, b backend.Backend) *ashlock.LockClient {
	t.Helper()
	c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{DefaultTTL: wdTTL, Logger: quiet}, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func TestLosingOneLeaseLeavesOtherGuardsAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, b := bubbleClient(t)
		ctx := t.Context()
		a, err := c.Lock("a").Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sameLease, err := c.Lock("b").Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		otherLease, err := c.Lock("c").WithTTL(2 * wdTTL).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		claimA, _ := a.Claim()
		claimO, _ := otherLease.Claim()
		if claimA.Lease == claimO.Lease {
			t.Fatalf("guards with different TTLs share lease %d", claimA.Lease)
		}
		b.ExpireLease(claimA.Lease)
		<-a.Done()
		<-sameLease.Done()
		time.Sleep(5 * wdTTL)
		if err := otherLease.Err(); err != nil {
			t.Errorf("guard on another lease: Err = %v, want nil", err)
		}
		// The client recovers by itself: the next acquisition gets a fresh lease.
		again, err := c.Lock("a").Acquire(ctx)
		if err != nil {
			t.Fatalf("Acquire after lease loss: %v", err)
		}
		if c2, _ := again.Claim(); c2.Lease == claimA.Lease {
			t.Errorf("new guard reuses the lost lease %d", c2.Lease)
		}
	})
}

// A lost lease is never handed out again, even to the next acquisition of
// the same kind with nothing acquired in between.
func TestLostLeaseIsNotJoinedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, b := bubbleClient(t)
		ctx := t.Context()
		g, err := c.Lock("a").Acquire(ctx)
		require.NoError(t, err)
		lost, _ := g.Claim()
		b.ExpireLease(lost.Lease)
		<-g.Done()
		synctest.Wait()
		again, err := c.Lock("a").Acquire(ctx)
		require.NoError(t, err, "Acquire after lease loss")
		c2, _ := again.Claim()
		assert.NotEqual(t, lost.Lease, c2.Lease, "new guard joined the lost lease")
	})
}

func TestDeletedClaimPoisonsOnlyItsGuard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, b := bubbleClient(t)
		ctx := t.Context()
		a, err := c.Lock("a").Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bg, err := c.Lock("b").Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.DeleteClaim("a")
		<-a.Done()
		if !errors.Is(a.Err(), ashlock.ErrLeaseExpired) {
			t.Errorf("Err = %v, want ErrLeaseExpired", a.Err())
		}
		time.Sleep(3 * wdTTL)
		if err := bg.Err(); err != nil {
			t.Errorf("guard on the same lease, other key: Err = %v, want nil", err)
		}
	})
}

func TestDoCancelsContextWithCauseOnPoisoning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, b := bubbleClient(t)
		var cause error
		err := c.Lock("k").Do(t.Context(), func(ctx context.Context, token uint64) error {
			if token == 0 {
				t.Error("Do passed token 0")
			}
			b.FailRenewals(errInjected)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil
		})
		if !errors.Is(cause, ashlock.ErrLeaseExpired) {
			t.Errorf("context.Cause = %v, want ErrLeaseExpired", cause)
		}
		if !errors.Is(err, ashlock.ErrLeaseExpired) {
			t.Errorf("Do = %v, want ErrLeaseExpired when fn ran past the lease", err)
		}
	})
}

func TestWatchdogIntervalDefaultsToAThirdOfTheLockTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := bubbleClient(t)
		g, err := c.Lock("k").WithTTL(300 * time.Millisecond).Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		// With a 300ms TTL (margin 75ms) the guard survives only if renewals
		// run at the lock's own third (100ms), not the client's 1s default.
		time.Sleep(10 * time.Second)
		if err := g.Err(); err != nil {
			t.Errorf("short-TTL guard: Err = %v, want nil", err)
		}
	})
}

// firstLossOnly is a memory backend that reports only the first claim
// loss of all, as if the reports of the others were still on their way
// (etcd sends one watch event per claim, one after another).
type firstLossOnly struct {
	*memory.Backend
	told atomic.Bool
}

func (f *firstLossOnly) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Claim, error) {
	inner := req.OnLost
	req.OnLost = backend.LossFunc(func(cause error) {
		if f.told.CompareAndSwap(false, true) {
			inner.ClaimLost(cause)
		}
	})
	return f.Backend.Acquire(ctx, req)
}

// One claim's loss has its lease checked at once: when the lease is gone,
// every guard on it is poisoned then, without waiting for the next renewal
// or for each claim's own report.
func TestOneLossChecksTheWholeLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		t.Cleanup(func() { _ = mem.Close() })
		c := bubbleClientOn(t, &firstLossOnly{Backend: mem})
		guards, lease := acquireMany(t, c, 5)
		start := time.Now()
		if !mem.ExpireLease(lease) {
			t.Fatal("the guards' lease was not live")
		}
		synctest.Wait() // no fake time passes: no renewal falls due
		for i, g := range guards {
			if err := g.Err(); !errors.Is(err, ashlock.ErrLeaseExpired) {
				t.Errorf("guard %d: Err = %v, want ErrLeaseExpired as soon as one claim's loss was reported", i, err)
			}
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("%v passed; the check must not wait for a renewal interval", d)
		}
	})
}

// staleRenewal is firstLossOnly whose next renewal, once held, is answered
// by the store at once but reaches the client only when let go: an answer
// from before a loss that arrives after it.
type staleRenewal struct {
	firstLossOnly
	hold    atomic.Bool
	held    chan struct{} // a renewal is being held
	letGo   chan struct{}
	renewed atomic.Int32
}

func (s *staleRenewal) KeepAlive(ctx context.Context, id backend.LeaseID) (time.Duration, error) {
	ttl, err := s.Backend.KeepAlive(ctx, id)
	s.renewed.Add(1)
	if s.hold.CompareAndSwap(true, false) {
		close(s.held)
		<-s.letGo
	}
	return ttl, err
}

// A loss reported while a renewal is in flight is checked by another
// renewal after it: the one in flight may have been answered before the
// lease went.
func TestLossDuringARenewalChecksAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		t.Cleanup(func() { _ = mem.Close() })
		be := &staleRenewal{firstLossOnly: firstLossOnly{Backend: mem}, held: make(chan struct{}), letGo: make(chan struct{})}
		c := bubbleClientOn(t, be)
		guards, lease := acquireMany(t, c, 3)
		be.hold.Store(true)
		<-be.held // the first scheduled renewal, answered "alive" and held
		if !mem.ExpireLease(lease) {
			t.Fatal("the guards' lease was not live")
		}
		synctest.Wait()
		at := time.Now()
		close(be.letGo) // the stale "alive" arrives
		synctest.Wait()
		for i, g := range guards {
			if err := g.Err(); !errors.Is(err, ashlock.ErrLeaseExpired) {
				t.Errorf("guard %d: Err = %v, want ErrLeaseExpired", i, err)
			}
		}
		if n := be.renewed.Load(); n < 2 {
			t.Errorf("%d renewals, want the held one and one more after it", n)
		}
		if d := time.Since(at); d != 0 {
			t.Errorf("%v passed after the stale answer; the second renewal must follow at once", d)
		}
	})
}

// An interval just below the TTL, which the configuration accepts, still
// keeps the lease on a healthy store: the renewal is sent a margin before
// the local deadline instead of after it.
func TestIntervalCloseToTheTTLKeepsTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := bubbleClient(t)
		g, err := c.Lock("k").WithWatchdogInterval(wdTTL - time.Millisecond).Acquire(t.Context())
		require.NoError(t, err)
		time.Sleep(20 * wdTTL)
		require.NoError(t, g.Err(), "after 20 TTLs on a healthy store")
		require.NoError(t, g.Unlock(t.Context()))
	})
}

// A renewal that fails when it is due, a margin before the deadline, is
// tried again before the deadline, however long the interval: a store that
// is back within that time keeps the lease.
func TestFailedRenewalIsRetriedBeforeTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, b := bubbleClient(t)
		const ttl = 10 * time.Second
		g, err := c.Lock("k").WithTTL(ttl).WithWatchdogInterval(9 * time.Second).Acquire(t.Context())
		require.NoError(t, err)
		// The renewal due at TTL - 2 margins fails; the store is back
		// 100ms later, 0.9s before the deadline (TTL - margin).
		b.FailRenewals(errInjected)
		time.Sleep(8*time.Second + 100*time.Millisecond)
		synctest.Wait()
		b.FailRenewals(nil)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.NoError(t, g.Err(), "2s after the store came back")
		require.NoError(t, g.Unlock(t.Context()))
	})
}
