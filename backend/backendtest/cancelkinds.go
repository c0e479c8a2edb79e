package backendtest

import (
	"context"
	"errors"
	"testing"

	"github.com/ash-lock/ashlock/backend"
)

// testCancelledWaitOfEveryKind cancels waiting shared, counted, exclusive
// and multi-key requests: each Acquire returns the context's error, leaves
// nothing at any key, and the claims that were behind it are admitted as
// if it had never queued, at once when nothing else is ahead of them.
func testCancelledWaitOfEveryKind(f *fixture) {
	cancelled := func(f *fixture, p *pending, key string) {
		f.t.Helper()
		p.cancel()
		err := f.fails(p, "cancelled wait")
		if !errors.Is(err, context.Canceled) || errors.Is(err, backend.ErrLocked) {
			f.t.Errorf("cancelled wait of %s returned %v, want an error wrapping context.Canceled (and not ErrLocked)", p.owner, err)
		}
		f.awaitGone(key, p.owner)
	}

	f.t.Run("Shared", func(t *testing.T) {
		f := f.sub(t)
		const key = "cancelkinds/shared"
		l := f.grant(holdTTL)
		h := f.acquire(req(key, l, "H"))
		r1 := f.start(shared(req(key, l, "R1")))
		f.awaitWaiters(key, "R1")
		r2 := f.start(shared(req(key, l, "R2")))
		f.awaitWaiters(key, "R1", "R2")
		cancelled(f, r1, key)
		f.awaitWaiters(key, "R2")
		f.release(h)
		r2c := f.got(r2)
		f.wantHolders(key, "R1 cancelled, H released", r2c)
		f.release(r2c)
		f.wantFree(key, "R2 released")
	})

	f.t.Run("WriterBetweenReaders", func(t *testing.T) {
		f := f.sub(t)
		const key = "cancelkinds/writer"
		l := f.grant(holdTTL)
		r1 := f.acquire(shared(req(key, l, "R1")))
		x := f.start(req(key, l, "X"))
		f.awaitWaiters(key, "X")
		r2 := f.start(shared(req(key, l, "R2")))
		f.awaitWaiters(key, "X", "R2")
		f.stillWaiting("R2 behind writer X", r2)
		// With X gone only a reader is ahead of R2: it must hold now,
		// beside R1, not wait for R1's release.
		cancelled(f, x, key)
		r2c := f.got(r2)
		f.wantHolders(key, "X cancelled", r1, r2c)
		f.releaseAll(r1, r2c)
		f.wantFree(key, "readers released")
	})

	f.t.Run("Counted", func(t *testing.T) {
		f := f.sub(t)
		const key, n = "cancelkinds/counted", 2
		l := f.grant(holdTTL)
		a := f.acquire(counted(req(key, l, "A"), n))
		b := f.acquire(counted(req(key, l, "B"), n))
		w1 := f.start(counted(req(key, l, "W1"), n))
		f.awaitWaiters(key, "W1")
		w2 := f.start(counted(req(key, l, "W2"), n))
		f.awaitWaiters(key, "W1", "W2")
		cancelled(f, w1, key)
		f.awaitWaiters(key, "W2")
		f.release(a)
		w2c := f.got(w2)
		if w2c.Permit != a.Permit {
			f.t.Errorf("W2 got permit %d, want the released one, %d", w2c.Permit, a.Permit)
		}
		f.wantHolders(key, "W1 cancelled, A released", b, w2c)
		f.releaseAll(b, w2c)
		f.wantFree(key, "holders released")
	})

	f.t.Run("MultiKey", func(t *testing.T) {
		f := f.sub(t)
		a, b, c := "cancelkinds/multi/a", "cancelkinds/multi/b", "cancelkinds/multi/c"
		l := f.grant(holdTTL)
		h := f.acquire(req(b, l, "H"))
		m := f.start(multi(l, "M", a, b, c))
		f.awaitWaiters(b, "M")
		p := f.start(req(a, l, "P"))
		f.awaitQueued(a, "P")
		f.stillWaiting("P behind multi-key M at "+a, p)
		// With M gone nothing is ahead of P at a: it must hold now.
		cancelled(f, m, b)
		pc := f.got(p)
		f.wantHolders(a, "M cancelled", pc)
		f.awaitGone(c, "M")
		f.wantFree(c, "M cancelled")
		f.wantHolders(b, "M cancelled", h)
		f.awaitWaiters(b)
		f.releaseAll(h, pc)
		for _, k := range []string{a, b, c} {
			f.wantFree(k, "everyone released (a leftover claim of M would hold it)")
		}
	})
}
