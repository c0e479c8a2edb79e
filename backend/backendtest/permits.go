package backendtest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ash-lock/ashlock/backend"
)

// testPermitsLowestFree fills a key of three permits, queues two more
// requests and releases holders out of order: each holder gets the lowest
// permit free when it came to hold the key, and each release admits
// exactly one waiter.
func testPermitsLowestFree(f *fixture) {
	const key, n = "permits/lowest", 3
	l := f.grant(holdTTL)
	var held []backend.Claim
	for i, o := range []string{"A", "B", "C"} {
		c := f.acquire(counted(req(key, l, o), n))
		if c.Permit != i {
			f.t.Errorf("%s, holder number %d of a free key of %d permits, got permit %d, want %d (the lowest free)", o, i+1, n, c.Permit, i)
		}
		held = append(held, c)
	}
	a, b, c := held[0], held[1], held[2]
	f.wantHolders(key, "three of three permits taken", a, b, c)

	d := f.start(counted(req(key, l, "D"), n))
	f.awaitWaiters(key, "D")
	e := f.start(counted(req(key, l, "E"), n))
	f.awaitWaiters(key, "D", "E")
	f.stillWaiting("every permit taken", d, e)

	f.release(b)
	dc := f.got(d)
	if dc.Permit != b.Permit {
		f.t.Errorf("D got permit %d after the holder of permit %d released, want %d", dc.Permit, b.Permit, b.Permit)
	}
	f.stillWaiting("one release admits one waiter", e)
	f.awaitWaiters(key, "E")
	f.wantHolders(key, "B released, D admitted", a, c, dc)

	f.release(a)
	ec := f.got(e)
	if ec.Permit != a.Permit {
		f.t.Errorf("E got permit %d after the holder of permit %d released, want %d", ec.Permit, a.Permit, a.Permit)
	}
	f.wantHolders(key, "A released, E admitted", c, dc, ec)

	// Two permits free (c's 2 and dc's 1): the next holder takes the lower.
	f.releaseAll(c, dc)
	g := f.acquire(try(counted(req(key, l, "G"), n)))
	if g.Permit != 1 {
		f.t.Errorf("G got permit %d with permits 1 and 2 free, want 1", g.Permit)
	}
	f.releaseAll(ec, g)
	f.wantFree(key, "every holder released")
	if info := f.inspect(key); info.Permits != 0 {
		f.t.Errorf("Inspect %q with nothing queued: Permits %d, want 0", key, info.Permits)
	}
}

// testPermitsExcludeAndFence has many goroutines, fair and non-fair, take
// one of three permits in turn. While it holds, each checks that nobody
// else holds its permit, that at most three claims hold, that the store
// lists it with that permit, and that its token is above every earlier
// token issued for the permit.
func testPermitsExcludeAndFence(f *fixture) {
	const (
		key     = "permits/fence"
		n       = 3
		workers = 8
		rounds  = 10
	)
	leases := []backend.Lease{f.grant(holdTTL), f.grant(holdTTL)}
	var (
		mu       sync.Mutex // guards everything below
		occupant [n]string
		last     [n]uint64
		holding  int
		count    int
		errs     []error
	)
	report := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	one := func(w, r int) error {
		ctx, cancel := context.WithTimeout(f.t.Context(), f.timeout)
		defer cancel()
		rq := counted(req(key, leases[w%2], fmt.Sprintf("worker %d round %d", w, r)), n)
		rq.Fair = (w+r)%4 != 0 // a quarter of the requests are non-fair
		c, err := f.b.Acquire(ctx, rq)
		if err != nil {
			return fmt.Errorf("acquire (fair=%v): %w", rq.Fair, err)
		}
		p := c.Permit
		if p < 0 || p >= n {
			report(fmt.Errorf("%s got permit %d, outside 0..%d", rq.Owner, p, n-1))
			return f.b.Release(ctx, c)
		}
		mu.Lock()
		if occupant[p] != "" {
			errs = append(errs, fmt.Errorf("%s got permit %d while %s held it", rq.Owner, p, occupant[p]))
		}
		occupant[p] = rq.Owner
		if holding++; holding > n {
			errs = append(errs, fmt.Errorf("%s is one of %d holders of a key of %d permits", rq.Owner, holding, n))
		}
		if c.Token <= last[p] {
			errs = append(errs, fmt.Errorf("%s got token %d for permit %d, not above the permit's earlier token %d", rq.Owner, c.Token, p, last[p]))
		}
		last[p] = c.Token
		count++
		mu.Unlock()

		if info, err := f.b.Inspect(ctx, key); err != nil {
			report(fmt.Errorf("inspect while holding: %w", err))
		} else {
			found := false
			for _, h := range info.Holders {
				found = found || (h.Token == c.Token && h.Permit == p)
			}
			if !found || len(info.Holders) > n {
				report(fmt.Errorf("%s holds permit %d with token %d, but Inspect lists holders %s", rq.Owner, p, c.Token, describeHolders(info)))
			}
		}

		mu.Lock()
		occupant[p] = ""
		holding--
		mu.Unlock()
		if err := f.b.Release(ctx, c); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return nil
	}
	f.runWorkers(workers, rounds, "counted acquisitions", one, report)
	f.errorsCapped(errs)
	if count != workers*rounds && len(errs) == 0 {
		f.t.Errorf("%d acquisitions recorded, want %d", count, workers*rounds)
	}
	f.wantFree(key, "after every worker released")
}

// testPermitMismatch checks that a request whose permit count differs from
// that of the claims queued on a key fails with ErrPermitMismatch, waiting
// or not, and leaves the queue as it was; that exclusive and shared claims
// count as one permit; and that a drained key accepts any count again.
func testPermitMismatch(f *fixture) {
	const key, other = "permits/mismatch", "permits/mismatch-other"
	l := f.grant(holdTTL)
	a := f.acquire(counted(req(key, l, "A"), 3))
	b := f.acquire(counted(req(key, l, "B"), 3))

	type bad struct {
		name string
		r    backend.AcquireRequest
		// wouldHold: with two claims ahead, the request would hold if
		// its count matched; otherwise a non-waiting one may be refused
		// with ErrLocked instead (the contract orders neither first).
		wouldHold bool
	}
	mismatched := func(owner string) []bad {
		return []bad{
			{"2 permits", counted(req(key, l, owner), 2), false},
			{"4 permits", counted(req(key, l, owner), 4), true},
			{"exclusive", req(key, l, owner), false},
			{"exclusive, Permits 1", counted(req(key, l, owner), 1), false},
			{"shared", shared(req(key, l, owner)), false},
			{"multi-key", multi(l, owner, key, other), false},
		}
	}
	// state renders what must not change.
	state := func() string {
		info := f.inspect(key)
		return fmt.Sprintf("permits %d holders %s waiters %q", info.Permits, describeHolders(info), waiterOwners(info))
	}
	check := func(phase string, waits []bool) {
		f.t.Helper()
		before := state()
		for _, wait := range waits {
			for _, c := range mismatched(fmt.Sprintf("M wait=%v", wait)) {
				r := c.r
				r.Wait = wait
				err := f.fails(f.start(r), phase+", "+c.name)
				locked := !wait && !c.wouldHold && errors.Is(err, backend.ErrLocked)
				if !errors.Is(err, backend.ErrPermitMismatch) && !locked {
					f.t.Errorf("%s: %s request (wait=%v): %v, want ErrPermitMismatch", phase, c.name, wait, err)
				}
				if after := state(); after != before {
					f.t.Errorf("%s: %s request (wait=%v) changed %q from %s to %s", phase, c.name, wait, key, before, after)
				}
			}
		}
		f.wantFree(other, phase+": mismatched multi-key requests")
	}
	check("two of three permits taken", []bool{true, false})

	c := f.acquire(counted(req(key, l, "C"), 3))
	d := f.start(counted(req(key, l, "D"), 3))
	f.awaitWaiters(key, "D")
	// Not Wait false: a full key may answer that with ErrLocked.
	check("every permit taken, D waiting", []bool{true})
	f.wantHolders(key, "after the mismatched requests", a, b, c)
	f.releaseAll(a, b, c)
	f.release(f.got(d))
	f.wantFree(key, "every counted claim released")

	// An exclusive key refuses counted requests, and takes shared and
	// Permits 1 requests as the one-permit claims they are.
	x := f.acquire(req(key, l, "X"))
	for _, wait := range []bool{true, false} {
		r := counted(req(key, l, fmt.Sprintf("K wait=%v", wait)), 3)
		r.Wait = wait
		err := f.fails(f.start(r), "counted request on an exclusive key")
		if !errors.Is(err, backend.ErrPermitMismatch) && (wait || !errors.Is(err, backend.ErrLocked)) {
			f.t.Errorf("counted request (wait=%v) on an exclusive key: %v, want ErrPermitMismatch", wait, err)
		}
		f.awaitWaiters(key)
		f.wantHolders(key, "a counted request refused on an exclusive key", x)
	}
	one := f.start(counted(req(key, l, "P1"), 1))
	f.awaitWaiters(key, "P1")
	s := f.start(shared(req(key, l, "S")))
	f.awaitWaiters(key, "P1", "S")
	f.release(x)
	oc := f.got(one)
	f.release(oc)
	f.release(f.got(s))
	f.wantFree(key, "exclusive, Permits 1 and shared claims released")

	g := f.acquire(counted(req(key, l, "G"), 2))
	f.wantHolders(key, "a drained key taken with another permit count", g)
	f.release(g)
}
