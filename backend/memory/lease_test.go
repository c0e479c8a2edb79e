package memory_test

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

func TestGrantRejectsNonPositiveTTL(t *testing.T) {
	b := newBackend(t)
	for _, ttl := range []time.Duration{0, -time.Nanosecond, -time.Hour} {
		if _, err := b.Grant(t.Context(), ttl); !errors.Is(err, memory.ErrInvalidTTL) {
			t.Errorf("Grant(%v): %v, want ErrInvalidTTL", ttl, err)
		}
	}
}

func TestGrantIsExact(t *testing.T) {
	b := newBackend(t)
	seen := map[backend.LeaseID]bool{}
	for _, ttl := range []time.Duration{time.Nanosecond, 1500 * time.Millisecond, 7 * time.Second} {
		l := grant(t, b, ttl)
		if l.TTL != ttl {
			t.Errorf("Grant(%v) granted %v, want exactly the request", ttl, l.TTL)
		}
		if l.ID == 0 || seen[l.ID] {
			t.Errorf("Grant returned lease ID %d, want a fresh non-zero one", l.ID)
		}
		seen[l.ID] = true
	}
}

func TestLeaseExpiresExactlyAfterTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		short := grant(t, b, 10*time.Second)
		long := grant(t, b, time.Hour)
		lostA, lostB := newLost(), newLost()
		ra := request("a", short, "A")
		ra.OnLost = backend.LossFunc(lostA.onLost)
		a := mustAcquire(t, b, ra)
		rb := request("b", short, "B")
		rb.OnLost = backend.LossFunc(lostB.onLost)
		mustAcquire(t, b, rb)
		next := start(t.Context(), b, request("a", long, "next"))
		synctest.Wait()

		// A fair and a non-fair request bound to the short lease, waiting
		// on a key held through the long one.
		blocker := mustAcquire(t, b, request("c", long, "C"))
		waitFair := start(t.Context(), b, request("c", short, "fair waiter"))
		rn := request("c", short, "non-fair waiter")
		rn.Fair = false
		waitUnfair := start(t.Context(), b, rn)
		synctest.Wait()

		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		if lostA.count() != 0 || next.returned() || waitFair.returned() || waitUnfair.returned() {
			t.Fatal("lease ended before its TTL")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		for name, l := range map[string]*lost{"A": lostA, "B": lostB} {
			if cause := l.await(t); !errors.Is(cause, backend.ErrLeaseExpired) {
				t.Errorf("OnLost of %s: %v, want ErrLeaseExpired", name, cause)
			}
		}
		nc, err := next.wait(t)
		if err != nil || nc.Token <= a.Token {
			t.Errorf("next holder of a: token %d err %v, want a token above %d", nc.Token, err, a.Token)
		}
		for name, w := range map[string]*bg{"fair": waitFair, "non-fair": waitUnfair} {
			if _, err := w.wait(t); !errors.Is(err, backend.ErrLeaseExpired) {
				t.Errorf("%s waiter on the expired lease: %v, want ErrLeaseExpired", name, err)
			}
		}
		if info := inspect(t, b, "c"); info.Token != blocker.Token || len(info.Waiters) != 0 {
			t.Errorf("key c after its waiters' lease expired: %+v, want only its holder", info)
		}
		if _, err := b.KeepAlive(t.Context(), short.ID); !errors.Is(err, backend.ErrLeaseExpired) {
			t.Errorf("KeepAlive of the expired lease: %v, want ErrLeaseExpired", err)
		}
		if lostA.count() != 1 || lostB.count() != 1 {
			t.Errorf("OnLost called %d and %d times, want once each", lostA.count(), lostB.count())
		}
	})
}

func TestKeepAliveRestartsTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, 10*time.Second)
		lost := newLost()
		r := request("k", l, "A")
		r.OnLost = backend.LossFunc(lost.onLost)
		mustAcquire(t, b, r)

		time.Sleep(9 * time.Second)
		ttl, err := b.KeepAlive(t.Context(), l.ID)
		if err != nil || ttl != 10*time.Second {
			t.Fatalf("KeepAlive: %v, %v; want 10s, nil", ttl, err)
		}
		time.Sleep(10*time.Second - time.Nanosecond) // 1ns before the renewed deadline
		synctest.Wait()
		if lost.count() != 0 {
			t.Fatal("lease expired before its renewed deadline")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if lost.count() != 1 {
			t.Fatal("lease did not expire at its renewed deadline")
		}
	})
}

func TestRevoke(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	lost := newLost()
	r := request("k", l, "A")
	r.OnLost = backend.LossFunc(lost.onLost)
	mustAcquire(t, b, r)
	if err := b.Revoke(t.Context(), l.ID); err != nil {
		t.Fatal(err)
	}
	if cause := lost.await(t); !errors.Is(cause, backend.ErrLeaseExpired) {
		t.Errorf("OnLost after Revoke: %v, want ErrLeaseExpired", cause)
	}
	if err := b.Revoke(t.Context(), l.ID); err != nil {
		t.Errorf("second Revoke: %v, want nil", err)
	}
	if err := b.Revoke(t.Context(), 12345); err != nil {
		t.Errorf("Revoke of a lease never granted: %v, want nil", err)
	}
	if _, err := b.Acquire(t.Context(), request("k", l, "late")); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Errorf("Acquire on a revoked lease: %v, want ErrLeaseExpired", err)
	}
}

// OnLost must not run on the goroutine of the call that caused the loss: a
// caller holding its own lock while revoking would deadlock against an
// OnLost that takes it.
func TestOnLostRunsOffTheCallersGoroutine(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	var mu sync.Mutex
	done := make(chan struct{})
	r := request("k", l, "A")
	r.OnLost = backend.LossFunc(func(error) {
		mu.Lock()
		defer mu.Unlock()
		close(done)
	})
	mustAcquire(t, b, r)
	mu.Lock()
	if err := b.Revoke(t.Context(), l.ID); err != nil {
		t.Fatal(err)
	}
	mu.Unlock()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("OnLost not called")
	}
}

func TestOnLostNotCalledForReleasedOrUnreturnedClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		other := grant(t, b, time.Hour)
		released, waiting := newLost(), newLost()
		r := request("k", l, "released")
		r.OnLost = backend.LossFunc(released.onLost)
		mustRelease(t, b, mustAcquire(t, b, r))

		mustAcquire(t, b, request("w", other, "holder"))
		rw := request("w", l, "waiting")
		rw.OnLost = backend.LossFunc(waiting.onLost)
		w := start(t.Context(), b, rw)
		synctest.Wait()

		if err := b.Revoke(t.Context(), l.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := w.wait(t); !errors.Is(err, backend.ErrLeaseExpired) {
			t.Errorf("waiter on revoked lease: %v, want ErrLeaseExpired", err)
		}
		synctest.Wait()
		if released.count() != 0 || waiting.count() != 0 {
			t.Errorf("OnLost called %d times for a released claim and %d for a waiter, want 0",
				released.count(), waiting.count())
		}
	})
}

func TestCloseUnblocksAndRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		l := grant(t, b, 10*time.Second)
		lost := newLost()
		r := request("k", l, "H")
		r.OnLost = backend.LossFunc(lost.onLost)
		h := mustAcquire(t, b, r)
		waiter := start(t.Context(), b, request("k", l, "W"))
		b.DelayRenewals(time.Hour)
		hung := make(chan error, 1)
		go func() { _, err := b.KeepAlive(t.Context(), l.ID); hung <- err }()
		synctest.Wait()

		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if _, err := waiter.wait(t); !errors.Is(err, backend.ErrClosed) {
			t.Errorf("waiting Acquire after Close: %v, want ErrClosed", err)
		}
		if err := <-hung; !errors.Is(err, backend.ErrClosed) {
			t.Errorf("hanging KeepAlive after Close: %v, want ErrClosed", err)
		}
		time.Sleep(time.Minute) // past the lease's TTL: its timer must be stopped
		synctest.Wait()
		if lost.count() != 0 {
			t.Error("OnLost called after Close")
		}
		if err := b.Close(); err != nil {
			t.Errorf("second Close: %v, want nil", err)
		}
		calls := map[string]func() error{
			"Grant":     func() error { _, err := b.Grant(t.Context(), time.Second); return err },
			"KeepAlive": func() error { _, err := b.KeepAlive(t.Context(), l.ID); return err },
			"Revoke":    func() error { return b.Revoke(t.Context(), l.ID) },
			"Acquire":   func() error { _, err := b.Acquire(t.Context(), request("x", l, "late")); return err },
			"Release":   func() error { return b.Release(t.Context(), h) },
			"Inspect":   func() error { _, err := b.Inspect(t.Context(), "k"); return err },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, backend.ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", name, err)
			}
		}
		for name, hook := range map[string]func() bool{
			"ExpireLease": func() bool { return b.ExpireLease(l.ID) },
			"ExpireKey":   func() bool { return b.ExpireKey("k") },
			"DeleteClaim": func() bool { return b.DeleteClaim("k") },
		} {
			if hook() {
				t.Errorf("%s after Close reported doing something", name)
			}
		}
		// synctest.Test fails if any goroutine of the bubble is left.
	})
}
