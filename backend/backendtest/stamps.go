package backendtest

import (
	"errors"

	"github.com/ash-lock/ashlock/backend"
)

// stamper is a Stamp function that records what it was given and returns
// the previous stamp advanced by one tick.
type stamper struct {
	calls int
	prev  backend.Timestamp
}

func (s *stamper) stamp(prev backend.Timestamp) (backend.Timestamp, error) {
	s.calls++
	s.prev = prev
	return backend.Timestamp{WallTime: prev.WallTime + 1000, Logical: prev.Logical + 1}, nil
}

// testStamps checks that each stamped holder's Stamp function is called once
// with the highest stamp of the key's earlier holders (zero for a new key),
// that the result is returned and reported by Inspect, that it survives the
// key going idle and unstamped holders, and that a failing Stamp fails the
// Acquire and records nothing.
func testStamps(f *fixture) {
	const key = "stamps"
	l := f.grant(holdTTL)
	var last backend.Timestamp
	stamped := func(owner string) (backend.AcquireRequest, *stamper) {
		s := &stamper{}
		r := req(key, l, owner)
		r.Stamp = s.stamp
		return r, s
	}
	check := func(owner string, c backend.Claim, s *stamper) {
		f.t.Helper()
		if s.calls != 1 {
			f.t.Errorf("%s: Stamp called %d times, want once", owner, s.calls)
		}
		if s.prev != last {
			f.t.Errorf("%s: Stamp given %v, want the previous holder's %v", owner, s.prev, last)
		}
		if !last.Less(c.Stamp) {
			f.t.Errorf("%s: claim stamp %v, want above %v (the Stamp function returned prev + 1)", owner, c.Stamp, last)
		}
		if info := f.inspect(key); info.Stamp != c.Stamp {
			f.t.Errorf("%s: Inspect reports stamp %v, want the holder's %v", owner, info.Stamp, c.Stamp)
		}
		last = c.Stamp
	}

	r, s := stamped("A")
	a := f.acquire(r)
	check("A (first holder)", a, s)

	r, s = stamped("W")
	w := f.start(r)
	f.awaitWaiters(key, "W")
	f.release(a)
	wc := f.got(w)
	check("W (woken waiter)", wc, s)
	f.release(wc)
	f.wantFree(key, "W released")

	r, s = stamped("B")
	b := f.acquire(try(r))
	check("B (key idle before)", b, s)
	f.release(b)

	plain := f.acquire(req(key, l, "unstamped"))
	if plain.Stamp != (backend.Timestamp{}) {
		f.t.Errorf("claim without a Stamp function has stamp %v, want zero", plain.Stamp)
	}
	f.release(plain)

	r = req(key, l, "failing")
	r.Stamp = func(backend.Timestamp) (backend.Timestamp, error) { return backend.Timestamp{}, errStamp }
	if _, err := f.b.Acquire(f.ctx(), r); !errors.Is(err, errStamp) {
		f.t.Errorf("Acquire with a failing Stamp: %v, want the stamp's error", err)
	}
	f.wantFree(key, "after a failed stamp")

	r, s = stamped("C")
	c := f.acquire(r)
	check("C (after an unstamped holder and a failed stamp)", c, s)
	f.release(c)

	other := &stamper{}
	ro := req(key+"/other", l, "other key")
	ro.Stamp = other.stamp
	oc := f.acquire(ro)
	if other.prev != (backend.Timestamp{}) {
		f.t.Errorf("first holder of %q given stamp %v, want zero: stamps leaked from %q", ro.Key, other.prev, key)
	}
	f.release(oc)
}
