package backendtest

import (
	"errors"

	"github.com/ash-lock/ashlock/backend"
)

// testTokensIncrease walks one key through every way a claim can end —
// release, cancelled wait, revoked lease, failed TryAcquire, failed stamp,
// non-fair hand-over, the key going idle — and checks that each token the
// key shows (holders and queued waiters) is above every earlier one.
func testTokensIncrease(f *fixture) {
	const key = "tokens"
	var last uint64
	var lastWho string
	see := func(who string, token uint64) {
		f.t.Helper()
		if token <= last {
			f.t.Errorf("%s has token %d, not above %d of %s before it", who, token, last, lastWho)
		}
		last, lastWho = token, who
	}
	l := f.grant(holdTTL)

	a := f.acquire(req(key, l, "A"))
	see("A", a.Token)
	f.wantHolder(key, a.Token, "A")
	f.release(a)

	b := f.acquire(unfair(req(key, l, "B")))
	see("B (non-fair, after a release)", b.Token)
	w := f.start(req(key, l, "W"))
	info := f.awaitWaiters(key, "W")
	if len(info.Waiters) == 1 {
		see("W (queued)", info.Waiters[0].Token)
	}
	w.cancel()
	if _, err := f.wait(w, f.timeout); err == nil {
		f.t.Errorf("cancelled Acquire by W succeeded")
	}
	if _, err := f.b.Acquire(f.ctx(), try(req(key, l, "T"))); !errors.Is(err, backend.ErrLocked) {
		f.t.Errorf("TryAcquire on a held key: %v, want ErrLocked", err)
	}
	f.release(b)

	c := f.acquire(req(key, l, "C"))
	see("C (after a cancelled wait and a failed TryAcquire)", c.Token)
	n := f.start(unfair(req(key, l, "N")))
	f.stillWaiting("non-fair N behind C", n)
	f.release(c)
	nc := f.got(n)
	see("N (non-fair, handed the key)", nc.Token)
	f.release(nc)

	short := f.grant(holdTTL)
	d := f.acquire(req(key, short, "D"))
	see("D", d.Token)
	if err := f.b.Revoke(f.ctx(), short.ID); err != nil {
		f.t.Fatalf("Revoke: %v", err)
	}
	e := f.acquire(req(key, l, "E"))
	see("E (after a revoked holder)", e.Token)
	f.release(e)

	bad := req(key, l, "S")
	bad.Stamp = func(backend.Timestamp) (backend.Timestamp, error) { return backend.Timestamp{}, errStamp }
	if _, err := f.b.Acquire(f.ctx(), bad); !errors.Is(err, errStamp) {
		f.t.Errorf("Acquire with a failing Stamp: %v, want the stamp's error", err)
	}
	g := f.acquire(req(key, l, "G"))
	see("G (after a failed stamp)", g.Token)
	f.release(g)
	f.wantFree(key, "after G released")
	h := f.acquire(req(key, l, "H"))
	see("H (key idle before)", h.Token)
	f.release(h)
}

var errStamp = errors.New("backendtest: stamp refused")

// testReleaseIdentity checks that Release removes a claim only when both
// its ID and token match: stale, forged, repeated or misaddressed releases
// leave the current holder alone and return nil.
func testReleaseIdentity(f *fixture) {
	const key = "identity"
	l := f.grant(holdTTL)
	a := f.acquire(req(key, l, "A"))
	f.release(a)
	b := f.acquire(req(key, l, "B"))
	w := f.start(req(key, l, "W"))
	f.awaitWaiters(key, "W")

	cases := []struct {
		name  string
		claim backend.Claim
	}{
		{"earlier holder released again", a},
		{"holder's ID with an earlier token", backend.Claim{Key: key, ID: b.ID, Lease: b.Lease, Token: a.Token}},
		// Not a.ID: a backend may lend A's name to B once A is gone.
		{"holder's token with another ID", backend.Claim{Key: key, ID: b.ID + "-other", Lease: b.Lease, Token: b.Token}},
		{"holder's ID and token on another key", backend.Claim{Key: key + "/other", ID: b.ID, Lease: b.Lease, Token: b.Token}},
		{"holder's ID and token on a prefix key", backend.Claim{Key: "identit", ID: b.ID, Lease: b.Lease, Token: b.Token}},
	}
	for _, c := range cases {
		if err := f.b.Release(f.ctx(), c.claim); err != nil {
			f.t.Errorf("%s: Release: %v, want nil for a claim the store does not have", c.name, err)
		}
		f.wantHolder(key, b.Token, c.name)
	}
	f.stillWaiting("after releases of claims other than the holder's", w)

	f.release(b)
	wc := f.got(w)
	f.release(b) // a retried release of B must not touch W
	f.wantHolder(key, wc.Token, "B released twice")
	f.release(wc)
	f.release(wc)
	f.wantFree(key, "W released twice")
}
