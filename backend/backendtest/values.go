package backendtest

import (
	"bytes"
	"errors"

	"github.com/ash-lock/ashlock/backend"
)

// wantValue reports an error unless key's holder of token publishes v.
func (f *fixture) wantValue(key string, token uint64, v []byte, context string) {
	f.t.Helper()
	info := f.inspect(key)
	for _, h := range info.Holders {
		if h.Token == token {
			if !bytes.Equal(h.Value, v) {
				f.t.Errorf("%s: Inspect %q: holder with token %d has value %q, want %q", context, key, token, h.Value, v)
			}
			return
		}
	}
	f.t.Errorf("%s: Inspect %q: no holder with token %d among %s", context, key, token, describeHolders(info))
}

// testValues checks that a claim publishes its request's value (Claim and
// Inspect), that SetValue replaces it (on every key of a multi-key claim),
// and that the backend keeps copies: changing the caller's slices later
// changes nothing.
func testValues(f *fixture) {
	const key = "values"
	l := f.grant(holdTTL)
	r := valued(req(key, l, "A"), "alpha")
	v := r.Value
	a := f.acquire(r) // checks Claim.Value
	f.wantValue(key, a.Token, []byte("alpha"), "claim made with a value")
	copy(v, "XXXXX")
	f.wantValue(key, a.Token, []byte("alpha"), "request's value changed by the caller after Acquire")
	if string(a.Value) != "alpha" {
		f.t.Errorf("claim's value is %q after the caller changed the request's, want %q", a.Value, "alpha")
	}

	nv := []byte("beta")
	if err := f.b.SetValue(f.ctx(), a, nv); err != nil {
		f.t.Fatalf("SetValue of a holder: %v", err)
	}
	f.wantValue(key, a.Token, []byte("beta"), "SetValue")
	copy(nv, "XXXX")
	f.wantValue(key, a.Token, []byte("beta"), "SetValue's slice changed by the caller afterwards")

	big := bytes.Repeat([]byte{0, 0xff, 'v'}, backend.MaxValueLen/3)
	big = append(big, make([]byte, backend.MaxValueLen-len(big))...)
	if err := f.b.SetValue(f.ctx(), a, big); err != nil {
		f.t.Errorf("SetValue of %d bytes (MaxValueLen): %v", len(big), err)
	}
	f.wantValue(key, a.Token, big, "SetValue of MaxValueLen bytes")
	if err := f.b.SetValue(f.ctx(), a, nil); err != nil {
		f.t.Errorf("SetValue(nil): %v", err)
	}
	f.wantValue(key, a.Token, nil, "SetValue(nil)")
	f.release(a)

	h := f.acquire(req(key, l, "H"))
	w := f.start(valued(req(key, l, "W"), "queued value"))
	f.awaitWaiters(key, "W")
	f.release(h)
	wc := f.got(w) // checks Claim.Value
	f.wantValue(key, wc.Token, []byte("queued value"), "waiter woken")
	f.release(wc)

	keys := []string{"values/x", "values/y", "values/z"}
	m := f.acquire(valued(multi(l, "M", keys...), "m1"))
	for _, k := range keys {
		f.wantValue(k, m.Token, []byte("m1"), "multi-key claim with a value")
	}
	if err := f.b.SetValue(f.ctx(), m, []byte("m2")); err != nil {
		f.t.Errorf("SetValue of a multi-key holder: %v", err)
	}
	for _, k := range keys {
		f.wantValue(k, m.Token, []byte("m2"), "SetValue of a multi-key claim")
	}
	f.release(m)

	s1 := f.acquire(valued(shared(req(key, l, "S1")), "one"))
	s2 := f.acquire(valued(shared(req(key, l, "S2")), "two"))
	if err := f.b.SetValue(f.ctx(), s2, []byte("two'")); err != nil {
		f.t.Errorf("SetValue of a shared holder: %v", err)
	}
	f.wantValue(key, s1.Token, []byte("one"), "SetValue of another shared holder")
	f.wantValue(key, s2.Token, []byte("two'"), "SetValue of a shared holder")
	f.releaseAll(s1, s2)
	f.wantFree(key, "every holder released")
}

// testSetValueComparesIdentity checks that SetValue changes a value only
// while the store still has that very claim: after its release, after its
// lease is revoked, or for a claim with the holder's ID but another token
// or the holder's token but another ID, it returns an error wrapping
// ErrLeaseExpired and the current holder's value stays.
func testSetValueComparesIdentity(f *fixture) {
	const key = "setvalue"
	l := f.grant(holdTTL)
	a := f.acquire(valued(req(key, l, "A"), "a"))
	w := f.start(valued(req(key, l, "W"), "w"))
	f.awaitWaiters(key, "W")
	f.release(a)
	wc := f.got(w)

	cases := []struct {
		name  string
		claim backend.Claim
	}{
		{"released claim", a},
		{"holder's ID with an earlier token", backend.Claim{Key: key, ID: wc.ID, Lease: wc.Lease, Token: a.Token}},
		{"holder's token with another ID", backend.Claim{Key: key, ID: wc.ID + "-other", Lease: wc.Lease, Token: wc.Token}},
	}
	for _, c := range cases {
		if err := f.b.SetValue(f.ctx(), c.claim, []byte("stale")); !errors.Is(err, backend.ErrLeaseExpired) {
			f.t.Errorf("SetValue of a %s: %v, want ErrLeaseExpired", c.name, err)
		}
		f.wantValue(key, wc.Token, []byte("w"), "SetValue of a "+c.name)
	}
	f.release(wc)
	if err := f.b.SetValue(f.ctx(), wc, []byte("stale")); !errors.Is(err, backend.ErrLeaseExpired) {
		f.t.Errorf("SetValue of a released claim on a free key: %v, want ErrLeaseExpired", err)
	}
	f.wantFree(key, "SetValue of a released claim")

	doomed := f.grant(holdTTL)
	d := f.acquire(valued(req(key, doomed, "D"), "d"))
	next := f.start(valued(req(key, l, "N"), "n"))
	f.awaitWaiters(key, "N")
	if err := f.b.Revoke(f.ctx(), doomed.ID); err != nil {
		f.t.Fatalf("Revoke: %v", err)
	}
	nc := f.got(next)
	if err := f.b.SetValue(f.ctx(), d, []byte("stale")); !errors.Is(err, backend.ErrLeaseExpired) {
		f.t.Errorf("SetValue of a claim whose lease was revoked: %v, want ErrLeaseExpired", err)
	}
	f.wantValue(key, nc.Token, []byte("n"), "SetValue of a claim whose lease was revoked")
	f.release(nc)
}
