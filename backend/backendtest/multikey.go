package backendtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/ash-lock/ashlock/backend"
)

// testMultiKeyHoldsAll takes three keys with histories of different
// lengths in one claim: it has one token, above every earlier token of
// each key, it is the holder at each key, and its release frees them all.
// A one-key set is a multi-key claim too.
func testMultiKeyHoldsAll(f *fixture) {
	keys := []string{"multi/a", "multi/b", "multi/c"}
	l := f.grant(holdTTL)
	last := map[string]uint64{}
	for i, k := range keys {
		for j := range len(keys) - i {
			c := f.acquire(req(k, l, fmt.Sprintf("earlier %d on %s", j, k)))
			last[k] = c.Token
			f.release(c)
		}
	}

	// Listed out of order: the caller sorts, as the contract asks.
	m := f.acquire(multi(l, "M", "multi/c", "multi/a", "multi/b"))
	if !slices.Equal(m.Keys, keys) || m.Key != keys[0] {
		f.t.Errorf("multi-key claim has Key %q Keys %q, want %q and %q", m.Key, m.Keys, keys[0], keys)
	}
	for _, k := range keys {
		if m.Token <= last[k] {
			f.t.Errorf("multi-key claim got token %d, not above the earlier token %d of %q", m.Token, last[k], k)
		}
		f.wantHolders(k, "multi-key claim", m)
		if info := f.inspect(k); len(info.Waiters) != 0 {
			f.t.Errorf("Inspect %q: waiters %q beside a multi-key holder, want none", k, waiterOwners(info))
		}
	}
	f.release(m)
	for _, k := range keys {
		f.wantFree(k, "multi-key claim released")
	}
	// Each key is whole again: held alone, it shows its holder and
	// excludes others.
	singles := make([]backend.Claim, len(keys))
	for i, k := range slices.Backward(keys) {
		singles[i] = f.acquire(req(k, l, "single on "+k))
	}
	f.release(f.acquire(req("multi/elsewhere", l, "E"))) // traffic on another key meanwhile
	for i, k := range keys {
		f.wantHolders(k, "single claims after the multi-key release", singles[i])
		if _, err := f.b.Acquire(f.ctx(), try(req(k, l, "T"))); !errors.Is(err, backend.ErrLocked) {
			f.t.Errorf("TryAcquire %q held by a single claim after a multi-key release: %v, want ErrLocked", k, err)
		}
	}
	f.releaseAll(singles...)

	solo := f.acquire(multi(l, "S", "multi/solo"))
	f.wantHolders("multi/solo", "one-key multi-key claim", solo)
	f.release(solo)
	f.wantFree("multi/solo", "one-key multi-key claim released")
}

// testMultiKeyWaitsForEveryKey has a multi-key request wait on one held
// key of three: it takes no key early, keeps its place in line at the
// others (a later request there waits behind it), and takes all three at
// once when the held key is released.
func testMultiKeyWaitsForEveryKey(f *fixture) {
	a, b, c := "multiwait/a", "multiwait/b", "multiwait/c"
	l := f.grant(holdTTL)
	h := f.acquire(req(b, l, "H"))
	m := f.start(multi(l, "M", a, b, c))
	f.awaitWaiters(b, "M")
	p := f.start(req(c, l, "P"))
	f.awaitQueued(c, "P")
	f.stillWaiting("M waits for "+b+", P behind M at "+c, m, p)
	if _, err := f.b.Acquire(f.ctx(), try(req(a, l, "T"))); !errors.Is(err, backend.ErrLocked) {
		f.t.Errorf("TryAcquire %q with a multi-key request queued on it: %v, want ErrLocked", a, err)
	}
	f.awaitGone(a, "T")

	f.release(h)
	mc := f.got(m)
	for _, k := range []string{a, b, c} {
		f.wantHolders(k, "M woken", mc)
	}
	f.awaitWaiters(c, "P")
	f.stillWaiting("M holds "+c, p)
	f.release(mc)
	pc := f.got(p)
	if pc.Token <= mc.Token {
		f.t.Errorf("P got token %d, not above M's %d", pc.Token, mc.Token)
	}
	f.wantFree(a, "M released")
	f.wantFree(b, "M released")
	f.release(pc)
	f.wantFree(c, "P released")
}

// testMultiKeyNoDeadlock has many goroutines take overlapping sets of keys
// (listed in different orders, sorted as the contract asks), single keys,
// shared sets and non-fair requests, in turn. They must all finish in
// time, no key may ever have an exclusive holder together with any other,
// and each exclusive holder's token must be above every token seen before
// on each of its keys.
func testMultiKeyNoDeadlock(f *fixture) {
	const (
		workers = 8
		rounds  = 12
	)
	keys := []string{"overlap/0", "overlap/1", "overlap/2", "overlap/3", "overlap/4"}
	leases := []backend.Lease{f.grant(holdTTL), f.grant(holdTTL)}

	type keyState struct {
		writer  string
		readers int
		last    uint64 // highest token of any holder seen
		lastX   uint64 // highest token of an exclusive holder seen
	}
	var (
		mu    sync.Mutex // guards everything below
		state = map[string]*keyState{}
		count int
		errs  []error
	)
	for _, k := range keys {
		state[k] = &keyState{}
	}
	report := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	one := func(rnd *rand.Rand, w, r int) error {
		ctx, cancel := context.WithTimeout(f.t.Context(), f.timeout)
		defer cancel()
		set := make([]string, 1+rnd.IntN(3))
		for i := range set {
			set[i] = keys[rnd.IntN(len(keys))]
		}
		owner := fmt.Sprintf("worker %d round %d", w, r)
		rq := multi(leases[w%2], owner, set...)
		if len(rq.Keys) == 1 && rnd.IntN(2) == 0 {
			rq.Keys = nil // a plain Lock among the LockAlls
		}
		rq.Shared = rnd.IntN(4) == 0
		rq.Fair = rnd.IntN(4) != 0
		c, err := f.b.Acquire(ctx, rq)
		if err != nil {
			return fmt.Errorf("acquire %q (shared=%v fair=%v): %w", rq.AllKeys(), rq.Shared, rq.Fair, err)
		}
		if c.Key != rq.Key || !slices.Equal(c.Keys, rq.Keys) {
			report(fmt.Errorf("%s asked for %q and got a claim on %q (Keys %q)", owner, rq.AllKeys(), c.Key, c.Keys))
		}
		mu.Lock()
		for _, k := range rq.AllKeys() {
			s := state[k]
			switch {
			case s.writer != "":
				errs = append(errs, fmt.Errorf("%s (shared=%v) holds %q while %s holds it exclusively", owner, rq.Shared, k, s.writer))
			case !rq.Shared && s.readers > 0:
				errs = append(errs, fmt.Errorf("%s holds %q exclusively while %d shared claims hold it", owner, k, s.readers))
			}
			if rq.Shared {
				s.readers++
				if c.Token <= s.lastX {
					errs = append(errs, fmt.Errorf("%s (shared) got token %d on %q, not above the earlier exclusive holder's %d", owner, c.Token, k, s.lastX))
				}
			} else {
				s.writer = owner
				if c.Token <= s.last {
					errs = append(errs, fmt.Errorf("%s got token %d on %q, not above the earlier holder's %d", owner, c.Token, k, s.last))
				}
				s.lastX = c.Token
			}
			s.last = max(s.last, c.Token)
		}
		count++
		mu.Unlock()

		// Asking the store while holding widens the window in which an
		// overlap would show and checks that the store agrees.
		k := rq.AllKeys()[rnd.IntN(len(rq.AllKeys()))]
		if info, err := f.b.Inspect(ctx, k); err != nil {
			report(fmt.Errorf("inspect while holding: %w", err))
		} else if !slices.ContainsFunc(info.Holders, func(h backend.Holder) bool { return h.Token == c.Token }) {
			report(fmt.Errorf("%s (keys %q shared=%v fair=%v) holds %q with token %d, but Inspect lists held=%v token %d holders %s waiters %q",
				owner, rq.AllKeys(), rq.Shared, rq.Fair, k, c.Token, info.Held, info.Token, describeHolders(info), waiterOwners(info)))
		}

		mu.Lock()
		for _, k := range rq.AllKeys() {
			if rq.Shared {
				state[k].readers--
			} else {
				state[k].writer = ""
			}
		}
		mu.Unlock()
		if err := f.b.Release(ctx, c); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return nil
	}
	rnds := make([]*rand.Rand, workers) // one per worker: a Rand is not safe for concurrent use
	for w := range rnds {
		rnds[w] = rand.New(rand.NewPCG(uint64(w), 42))
	}
	f.runWorkers(workers, rounds, "overlapping multi-key requests (a deadlock?)", func(w, r int) error { return one(rnds[w], w, r) }, report)
	f.errorsCapped(errs)
	if count != workers*rounds && len(errs) == 0 {
		f.t.Errorf("%d acquisitions recorded, want %d", count, workers*rounds)
	}
	for _, k := range keys {
		f.wantFree(k, "after every worker released")
	}
}

// testMultiKeyTryAcquire checks that a non-waiting multi-key request fails
// with ErrLocked when any of its keys is held, fair or not, leaving nothing
// at any key, and succeeds when all are free.
func testMultiKeyTryAcquire(f *fixture) {
	keys := []string{"multitry/a", "multitry/b", "multitry/c"}
	l := f.grant(holdTTL)
	for _, held := range keys {
		h := f.acquire(req(held, l, "H"))
		for _, fair := range []bool{true, false} {
			r := try(multi(l, fmt.Sprintf("T fair=%v", fair), keys...))
			r.Fair = fair
			if _, err := f.b.Acquire(f.ctx(), r); !errors.Is(err, backend.ErrLocked) {
				f.t.Errorf("multi-key TryAcquire (fair=%v) with %q held: %v, want ErrLocked", fair, held, err)
			}
		}
		for _, k := range keys {
			if k == held {
				f.wantHolders(k, "failed multi-key TryAcquire", h)
				f.awaitWaiters(k)
			} else {
				f.wantFree(k, fmt.Sprintf("failed multi-key TryAcquire with %q held", held))
			}
		}
		f.release(h)
	}
	m := f.acquire(try(multi(l, "M", keys...)))
	for _, k := range keys {
		f.wantHolders(k, "multi-key TryAcquire on free keys", m)
	}
	f.release(m)
	for _, k := range keys {
		f.wantFree(k, "multi-key claim released")
	}
}

// testSharedMultiKey checks shared multi-key claims: overlapping ones hold
// together, an exclusive claim on a key they share waits for both, and a
// shared multi-key request waits for an exclusive holder of one key.
func testSharedMultiKey(f *fixture) {
	a, b, c := "sharedmulti/a", "sharedmulti/b", "sharedmulti/c"
	l := f.grant(holdTTL)
	r1 := f.acquire(shared(multi(l, "R1", a, b)))
	r2 := f.acquire(shared(multi(l, "R2", b, c)))
	f.wantHolders(a, "shared R1 on a,b", r1)
	f.wantHolders(b, "shared R1 on a,b and R2 on b,c", r1, r2)
	f.wantHolders(c, "shared R2 on b,c", r2)

	x := f.start(req(b, l, "X"))
	f.awaitWaiters(b, "X")
	f.release(r1)
	f.stillWaiting("R2 still holds "+b, x)
	f.release(r2)
	xc := f.got(x)

	r3 := f.start(shared(multi(l, "R3", a, b, c)))
	f.awaitWaiters(b, "R3")
	f.stillWaiting("X holds "+b, r3)
	if _, err := f.b.Acquire(f.ctx(), try(shared(multi(l, "T", a, b)))); !errors.Is(err, backend.ErrLocked) {
		f.t.Errorf("shared multi-key TryAcquire with one key held exclusively: %v, want ErrLocked", err)
	}
	f.release(xc)
	r3c := f.got(r3)
	for _, k := range []string{a, b, c} {
		f.wantHolders(k, "R3 woken", r3c)
	}
	f.release(r3c)
	for _, k := range []string{a, b, c} {
		f.wantFree(k, "R3 released")
	}
}
