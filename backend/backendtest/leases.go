package backendtest

import (
	"errors"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// testGrantRenew checks granted TTLs (never short of the request), renewal,
// and that a revoked lease can be neither renewed nor used.
func testGrantRenew(f *fixture) {
	seen := map[backend.LeaseID]bool{}
	for _, ttl := range []time.Duration{1500 * time.Millisecond, 5 * time.Second, 45 * time.Second} {
		f.t.Run(ttl.String(), func(t *testing.T) {
			f := f.sub(t)
			l := f.grant(ttl)
			if l.ID == 0 {
				t.Errorf("Grant(%v) returned lease ID 0", ttl)
			}
			if seen[l.ID] {
				t.Errorf("Grant(%v) returned lease ID %d a second time", ttl, l.ID)
			}
			seen[l.ID] = true
			if l.TTL < ttl {
				t.Errorf("Grant(%v) granted %v, short of the request", ttl, l.TTL)
			}
			got, err := f.b.KeepAlive(f.ctx(), l.ID)
			if err != nil {
				t.Errorf("KeepAlive of a live lease: %v", err)
			} else if got < ttl {
				t.Errorf("KeepAlive renewed for %v, short of the requested %v", got, ttl)
			}
		})
	}

	l := f.grant(holdTTL)
	if err := f.b.Revoke(f.ctx(), l.ID); err != nil {
		f.t.Fatalf("Revoke of a live lease: %v", err)
	}
	if err := f.b.Revoke(f.ctx(), l.ID); err != nil {
		f.t.Errorf("Revoke of a revoked lease: %v, want nil", err)
	}
	if _, err := f.b.KeepAlive(f.ctx(), l.ID); !errors.Is(err, backend.ErrLeaseExpired) {
		f.t.Errorf("KeepAlive of a revoked lease: %v, want ErrLeaseExpired", err)
	}
	if _, err := f.b.Acquire(f.ctx(), req("revoked", l, "R")); !errors.Is(err, backend.ErrLeaseExpired) {
		f.t.Errorf("Acquire on a revoked lease: %v, want ErrLeaseExpired", err)
	}
	f.wantFree("revoked", "after an Acquire on a revoked lease")
}

// testRevokeSignalsLoss revokes a lease that holds two keys and waits on a
// third, and checks every consequence: both holders get OnLost once, the
// waiter fails with ErrLeaseExpired, the next waiter on a lost key gets it,
// and claims on other leases are untouched.
func testRevokeSignalsLoss(f *fixture) {
	doomed, other := f.grant(holdTTL), f.grant(holdTTL)

	lostA, lostB, lostC := newLostRecorder(), newLostRecorder(), newLostRecorder()
	withLost := func(r backend.AcquireRequest, rec *lostRecorder) backend.AcquireRequest {
		r.OnLost = backend.LossFunc(rec.onLost)
		return r
	}
	a := f.acquire(withLost(req("loss/1", doomed, "A"), lostA))
	f.acquire(withLost(req("loss/2", doomed, "B"), lostB))
	c := f.acquire(withLost(req("loss/3", other, "C"), lostC))
	next := f.start(req("loss/1", other, "next on loss/1"))
	f.awaitWaiters("loss/1", "next on loss/1")
	victim := f.start(req("loss/3", doomed, "waiter on the revoked lease"))
	f.awaitWaiters("loss/3", "waiter on the revoked lease")

	if err := f.b.Revoke(f.ctx(), doomed.ID); err != nil {
		f.t.Fatalf("Revoke: %v", err)
	}
	f.awaitLost(lostA, "holder A of loss/1", f.timeout)
	f.awaitLost(lostB, "holder B of loss/2", f.timeout)
	if _, err := f.wait(victim, f.timeout); !errors.Is(err, backend.ErrLeaseExpired) {
		f.t.Errorf("waiter on a revoked lease: Acquire returned %v, want ErrLeaseExpired", err)
	}
	nc := f.got(next)
	if nc.Token <= a.Token {
		f.t.Errorf("next holder of loss/1 got token %d, not above the lost holder's %d", nc.Token, a.Token)
	}
	f.wantFree("loss/2", "its holder's lease revoked")
	f.awaitGone("loss/3", "waiter on the revoked lease")
	f.wantHolder("loss/3", c.Token, "holder on another lease")
	if err := f.b.Release(f.ctx(), a); err != nil {
		f.t.Errorf("Release of a claim lost with its lease: %v, want nil", err)
	}
	if _, err := f.b.Acquire(f.ctx(), req("loss/4", doomed, "late")); !errors.Is(err, backend.ErrLeaseExpired) {
		f.t.Errorf("Acquire on the revoked lease: %v, want ErrLeaseExpired", err)
	}

	f.stillWaiting("OnLost settles") // a quiet period for late or repeated calls
	for _, r := range []struct {
		name string
		rec  *lostRecorder
		want int
	}{{"A", lostA, 1}, {"B", lostB, 1}, {"C (other lease)", lostC, 0}} {
		if got := len(r.rec.calls()); got != r.want {
			f.t.Errorf("OnLost of %s called %d times, want %d", r.name, got, r.want)
		}
	}
}

// testReleasedNotLost checks that a claim released before its lease is
// revoked never gets OnLost, while one still held does.
func testReleasedNotLost(f *fixture) {
	l := f.grant(holdTTL)
	released, held := newLostRecorder(), newLostRecorder()
	r1 := req("released/1", l, "released")
	r1.OnLost = backend.LossFunc(released.onLost)
	r2 := req("released/2", l, "held")
	r2.OnLost = backend.LossFunc(held.onLost)
	c1 := f.acquire(r1)
	f.acquire(r2)
	f.release(c1)
	if err := f.b.Revoke(f.ctx(), l.ID); err != nil {
		f.t.Fatalf("Revoke: %v", err)
	}
	f.awaitLost(held, "the claim still held", f.timeout)
	f.stillWaiting("OnLost settles")
	if n := len(released.calls()); n != 0 {
		f.t.Errorf("OnLost of a released claim called %d times after its lease was revoked, want 0", n)
	}
}

// testLeaseExpires grants the shortest lease the backend will give and
// never renews it: its holder must get OnLost, the next waiter the key, and
// KeepAlive must then refuse the lease. This is the suite's one wait for a
// TTL.
func testLeaseExpires(f *fixture) {
	const key = "expiry"
	short := f.grant(50 * time.Millisecond)
	long := f.grant(holdTTL)
	lost := newLostRecorder()
	r := req(key, short, "A")
	r.OnLost = backend.LossFunc(lost.onLost)
	a := f.acquire(r)
	w := f.start(req(key, long, "W"))
	f.awaitWaiters(key, "W")

	bound := short.TTL + f.timeout
	f.awaitLost(lost, "a holder whose lease was not renewed", bound)
	if _, err := f.wait(w, bound); err != nil {
		f.t.Fatalf("waiter behind an expired holder: %v", err)
	}
	if w.claim.Token <= a.Token {
		f.t.Errorf("waiter got token %d, not above the expired holder's %d", w.claim.Token, a.Token)
	}
	if _, err := f.b.KeepAlive(f.ctx(), short.ID); !errors.Is(err, backend.ErrLeaseExpired) {
		f.t.Errorf("KeepAlive of an expired lease: %v, want ErrLeaseExpired", err)
	}
	if err := f.b.Release(f.ctx(), a); err != nil {
		f.t.Errorf("Release of an expired claim: %v, want nil", err)
	}
	f.wantHolder(key, w.claim.Token, "after the expired holder's late release")
	f.release(w.claim)
}

// testClose closes the backend under a holder and a waiter: the waiter's
// Acquire returns ErrClosed, and every later call does too.
func testClose(f *fixture) {
	const key = "close"
	l := f.grant(holdTTL)
	holder := f.acquire(req(key, l, "H"))
	w := f.start(req(key, l, "W"))
	f.awaitWaiters(key, "W")

	if err := f.b.Close(); err != nil {
		f.t.Errorf("Close: %v", err)
	}
	if _, err := f.wait(w, f.timeout); !errors.Is(err, backend.ErrClosed) {
		f.t.Errorf("Acquire blocked across Close returned %v, want ErrClosed", err)
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"Grant", func() error { _, err := f.b.Grant(f.ctx(), holdTTL); return err }},
		{"KeepAlive", func() error { _, err := f.b.KeepAlive(f.ctx(), l.ID); return err }},
		{"Revoke", func() error { return f.b.Revoke(f.ctx(), l.ID) }},
		{"Acquire", func() error { _, err := f.b.Acquire(f.ctx(), req(key+"/new", l, "late")); return err }},
		{"Release", func() error { return f.b.Release(f.ctx(), holder) }},
		{"Inspect", func() error { _, err := f.b.Inspect(f.ctx(), key); return err }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, backend.ErrClosed) {
			f.t.Errorf("%s after Close: %v, want ErrClosed", c.name, err)
		}
	}
}
