package backendtest

import (
	"slices"
	"testing"

	"github.com/ash-lock/ashlock/backend"
)

// staleRelease is a Release of a claim the store no longer has.
type staleRelease struct {
	name  string
	claim backend.Claim
}

// as returns c with the ID and token given: a claim that mixes the
// identity of two claims, which the store never has.
func as(c backend.Claim, id string, token uint64) backend.Claim {
	c.ID, c.Token = id, token
	return c
}

// staleAfterReuse returns the stale releases to send once a claim of kind
// has been released and holder, of its kind and lease, holds (under the
// name released had, in a store that names claims after their lease):
// released itself, and two claims that mix its identity with holder's.
func staleAfterReuse(kind string, released, holder backend.Claim) []staleRelease {
	return []staleRelease{
		{"released " + kind + " claim released again", released},
		{kind + " holder's ID with the released claim's token", as(released, holder.ID, released.Token)},
		{kind + " holder's token with another ID", as(holder, holder.ID+"-other", holder.Token)},
	}
}

// releaseStale sends each of cases' releases; each must return nil and,
// as check (called after each) verifies, remove nothing.
func (f *fixture) releaseStale(cases []staleRelease, check func(context string)) {
	f.t.Helper()
	for _, c := range cases {
		if err := f.b.Release(f.ctx(), c.claim); err != nil {
			f.t.Errorf("%s: Release: %v, want nil for a claim the store does not have", c.name, err)
		}
		check(c.name)
	}
}

// wantQueued reports an error unless owner is among key's waiters.
func (f *fixture) wantQueued(key, owner, context string) {
	f.t.Helper()
	if got := waiterOwners(f.inspect(key)); !slices.Contains(got, owner) {
		f.t.Errorf("%s: Inspect %q: waiters %q, want %s among them", context, key, got, owner)
	}
}

// testReleaseOfEveryKindComparesIdentity is ReleaseComparesIdentity for
// shared, counted and multi-key claims: a Release of a claim that has
// been released already, or lost with its lease, or one that mixes the
// identity of two claims, returns nil and removes no later claim -
// holder or waiter, of the same lease or another, of the same kind (which
// a store that names claims after their lease, as backend/etcd does,
// gives the very name the stale claim had) or another - at any of the
// stale claim's keys.
func testReleaseOfEveryKindComparesIdentity(f *fixture) {
	f.t.Run("Shared", func(t *testing.T) {
		f := f.sub(t)
		const key = "releasekinds/shared"
		l, other := f.grant(holdTTL), f.grant(holdTTL)
		s1 := f.acquire(shared(req(key, l, "S1")))
		f.release(s1)
		// S2 is of S1's kind and lease.
		s2 := f.acquire(shared(req(key, l, "S2")))
		s3 := f.acquire(shared(req(key, other, "S3")))
		w := f.start(req(key, l, "W"))
		f.awaitWaiters(key, "W")
		f.releaseStale(staleAfterReuse("shared", s1, s2), func(context string) {
			f.wantHolders(key, context, s2, s3)
			f.wantQueued(key, "W", context)
		})
		f.stillWaiting("writer W behind shared holders, after stale releases", w)
		f.release(s2)
		f.release(s2) // retried
		f.wantHolders(key, "S2 released twice", s3)
		f.stillWaiting("writer W behind S3", w)
		f.release(s3)
		wc := f.got(w)
		f.releaseAll(s1, s2, s3) // retried after W took the key
		f.wantHolders(key, "readers released again after writer W took the key", wc)
		f.release(wc)

		doomed := f.grant(holdTTL)
		d := f.acquire(shared(req(key, doomed, "D")))
		if err := f.b.Revoke(f.ctx(), doomed.ID); err != nil {
			f.t.Fatalf("Revoke: %v", err)
		}
		r := f.acquire(shared(req(key, l, "R")))
		x := f.start(req(key, other, "X"))
		f.awaitWaiters(key, "X")
		f.releaseStale([]staleRelease{{"shared claim lost with its lease", d}}, func(context string) {
			f.wantHolders(key, context, r)
			f.wantQueued(key, "X", context)
		})
		f.release(r)
		xc := f.got(x)
		f.releaseAll(d, r)
		f.wantHolders(key, "lost and released readers released again", xc)
		f.release(xc)
		f.wantFree(key, "everyone released")
	})

	f.t.Run("Counted", func(t *testing.T) {
		f := f.sub(t)
		const key, n = "releasekinds/counted", 2
		l, other := f.grant(holdTTL), f.grant(holdTTL)
		c1 := f.acquire(counted(req(key, l, "C1"), n))
		f.release(c1)
		// C2 is of C1's kind and lease, and takes C1's permit.
		c2 := f.acquire(counted(req(key, l, "C2"), n))
		c3 := f.acquire(counted(req(key, other, "C3"), n))
		w := f.start(counted(req(key, l, "W"), n))
		f.awaitWaiters(key, "W")
		f.releaseStale(staleAfterReuse("counted", c1, c2), func(context string) {
			f.wantHolders(key, context, c2, c3)
			f.wantQueued(key, "W", context)
		})
		f.stillWaiting("W behind a full pool, after stale releases", w)
		f.release(c2)
		wc := f.got(w)
		if wc.Permit != c2.Permit {
			f.t.Errorf("W got permit %d, want C2's %d", wc.Permit, c2.Permit)
		}
		f.releaseAll(c1, c2) // retried after W took C2's permit
		f.wantHolders(key, "C1 and C2 released again after W took the permit", c3, wc)
		f.releaseAll(c3, wc)

		doomed := f.grant(holdTTL)
		d := f.acquire(counted(req(key, doomed, "D"), n))
		e := f.acquire(counted(req(key, l, "E"), n))
		if err := f.b.Revoke(f.ctx(), doomed.ID); err != nil {
			f.t.Fatalf("Revoke: %v", err)
		}
		g := f.acquire(counted(req(key, other, "G"), n))
		if g.Permit != d.Permit {
			f.t.Errorf("G got permit %d, want the lost claim's %d", g.Permit, d.Permit)
		}
		f.releaseStale([]staleRelease{{"counted claim lost with its lease", d}}, func(context string) {
			f.wantHolders(key, context, e, g)
		})
		f.releaseAll(e, g)
		f.wantFree(key, "everyone released")
	})

	f.t.Run("MultiKey", func(t *testing.T) {
		f := f.sub(t)
		a, b, c, d := "releasekinds/multi/a", "releasekinds/multi/b", "releasekinds/multi/c", "releasekinds/multi/d"
		l, other := f.grant(holdTTL), f.grant(holdTTL)
		m := f.acquire(multi(l, "M", a, b, c))
		f.release(m)
		// N is M again: its keys, kind and lease.
		n := f.acquire(multi(l, "N", a, b, c))
		f.releaseStale(staleAfterReuse("multi-key", m, n), func(context string) {
			for _, k := range []string{a, b, c} {
				f.wantHolders(k, context, n)
			}
		})
		f.release(n)
		f.release(n) // retried
		for _, k := range []string{a, b, c} {
			f.wantFree(k, "N released twice")
		}

		// A later claim at each of M's and N's keys, the first one too:
		// X of their kind and lease at a, readers at b, Y (multi-key, of
		// their kind and lease) at c and beyond, and Q queued at a and b.
		x := f.acquire(req(a, l, "X"))
		r1 := f.acquire(shared(req(b, l, "R1")))
		r2 := f.acquire(shared(req(b, other, "R2")))
		y := f.acquire(multi(l, "Y", c, d))
		q := f.start(multi(other, "Q", a, b))
		f.awaitQueued(a, "Q")
		f.awaitQueued(b, "Q")
		later := func(context string) {
			f.wantHolders(a, context, x)
			f.wantHolders(b, context, r1, r2)
			f.wantHolders(c, context, y)
			f.wantHolders(d, context, y)
			f.wantQueued(a, "Q", context)
			f.wantQueued(b, "Q", context)
		}
		f.releaseStale([]staleRelease{
			{"multi-key claim released again, its keys held by others", m},
			{"multi-key claim released again, its keys held by others (N)", n},
		}, later)
		f.stillWaiting("Q behind X and the readers, after stale releases", q)
		f.releaseAll(x, r1, r2)
		qc := f.got(q)
		f.releaseAll(m, n, x, r1) // retried after Q took a and b
		f.wantHolders(a, "X released again after Q took the key", qc)
		f.wantHolders(b, "readers released again after Q took the key", qc)
		f.wantHolders(c, "Y's keys after stale releases", y)
		f.releaseAll(qc, y)

		doomed := f.grant(holdTTL)
		dm := f.acquire(multi(doomed, "DM", a, b, c))
		if err := f.b.Revoke(f.ctx(), doomed.ID); err != nil {
			f.t.Fatalf("Revoke: %v", err)
		}
		g := f.acquire(req(a, other, "G"))
		e := f.acquire(multi(l, "E", b, c))
		f.releaseStale([]staleRelease{{"multi-key claim lost with its lease", dm}}, func(context string) {
			f.wantHolders(a, context, g)
			f.wantHolders(b, context, e)
			f.wantHolders(c, context, e)
		})
		f.releaseAll(g, e)
		for _, k := range []string{a, b, c, d} {
			f.wantFree(k, "everyone released")
		}
	})
}
