package backendtest

import (
	"errors"
	"fmt"

	"github.com/ash-lock/ashlock/backend"
)

// testSharedHoldTogether checks that shared claims hold a key together and
// that an exclusive claim waits until the last of them is released.
func testSharedHoldTogether(f *fixture) {
	const key = "shared/together"
	l := f.grant(holdTTL)
	r1 := f.acquire(shared(req(key, l, "R1")))
	r2 := f.acquire(shared(req(key, l, "R2")))
	f.wantHolders(key, "two shared claims", r1, r2)

	x := f.start(req(key, l, "X"))
	f.awaitWaiters(key, "X")
	f.stillWaiting("exclusive X behind two shared holders", x)
	f.release(r1)
	f.stillWaiting("exclusive X behind one shared holder", x)
	f.wantHolders(key, "R1 released", r2)
	f.release(r2)
	xc := f.got(x)
	f.wantHolders(key, "X after both readers released", xc)
	f.release(xc)
	f.wantFree(key, "X released")
}

// testReadersDoNotStarveWriters checks that a shared request queued behind
// a waiting exclusive one waits, fair or not, even though only shared
// claims hold the key, and gets the key after the writer.
func testReadersDoNotStarveWriters(f *fixture) {
	const key = "shared/writer-first"
	l := f.grant(holdTTL)
	r1 := f.acquire(shared(req(key, l, "R1")))
	x := f.start(req(key, l, "X"))
	f.awaitWaiters(key, "X")
	r2 := f.start(shared(req(key, l, "R2")))
	f.awaitWaiters(key, "X", "R2")
	n := f.start(unfair(shared(req(key, l, "N"))))
	f.stillWaiting("shared R2 (fair) and N (non-fair) behind a waiting writer, only a reader holding", r2, n)

	for _, fair := range []bool{true, false} {
		r := try(shared(req(key, l, fmt.Sprintf("T fair=%v", fair))))
		r.Fair = fair
		if _, err := f.b.Acquire(f.ctx(), r); !errors.Is(err, backend.ErrLocked) {
			f.t.Errorf("shared TryAcquire (fair=%v) with a writer queued: %v, want ErrLocked", fair, err)
		}
	}
	f.awaitWaiters(key, "X", "R2")
	f.wantHolders(key, "after shared TryAcquires behind a queued writer", r1)

	f.release(r1)
	xc := f.got(x)
	f.stillWaiting("X holds", r2, n)
	f.wantHolders(key, "X woken", xc)
	f.release(xc)
	r2c := f.got(r2)
	nc := f.got(n)
	f.wantHolders(key, "X released: R2 and then non-fair N hold together", r2c, nc)
	f.releaseAll(r2c, nc)
	f.wantFree(key, "readers released")
}

// testWriterAdmitsReaderRun queues three shared claims, a writer and a
// fourth shared claim behind a writer: its release must admit the first
// three at once, and only those.
func testWriterAdmitsReaderRun(f *fixture) {
	const key = "shared/run"
	l := f.grant(holdTTL)
	w1 := f.acquire(req(key, l, "W1"))
	owners := []string{"R1", "R2", "R3", "W2", "R4"}
	ps := map[string]*pending{}
	for i, o := range owners {
		r := req(key, l, o)
		r.Shared = o[0] == 'R'
		ps[o] = f.start(r)
		f.awaitWaiters(key, owners[:i+1]...)
	}
	info := f.awaitWaiters(key, owners...)
	f.wantWaiterKinds(info, owners, []bool{true, true, true, false, true})

	f.release(w1)
	// Each of R1..R3 must return while none of them has released: they
	// hold together.
	r1, r2, r3 := f.got(ps["R1"]), f.got(ps["R2"]), f.got(ps["R3"])
	f.wantHolders(key, "W1 released: the run of readers R1..R3", r1, r2, r3)
	f.awaitWaiters(key, "W2", "R4")
	f.stillWaiting("readers R1..R3 hold", ps["W2"], ps["R4"])

	f.release(r2)
	f.release(r1)
	f.stillWaiting("R3 still holds", ps["W2"], ps["R4"])
	f.release(r3)
	w2 := f.got(ps["W2"])
	f.stillWaiting("W2 holds", ps["R4"])
	f.wantHolders(key, "W2 woken", w2)
	f.release(w2)
	r4 := f.got(ps["R4"])
	f.wantHolders(key, "R4 woken", r4)
	f.release(r4)
	f.wantFree(key, "everyone released")
}

// testSharedTryAcquire checks that a non-waiting shared request succeeds
// while only shared claims hold the key and nobody waits, and otherwise
// fails with ErrLocked, leaving nothing behind.
func testSharedTryAcquire(f *fixture) {
	const key = "shared/try"
	l := f.grant(holdTTL)
	t1 := f.acquire(try(shared(req(key, l, "T1"))))
	t2 := f.acquire(try(shared(req(key, l, "T2"))))
	t3 := f.acquire(try(unfair(shared(req(key, l, "T3")))))
	f.wantHolders(key, "three shared TryAcquires", t1, t2, t3)

	if _, err := f.b.Acquire(f.ctx(), try(req(key, l, "E"))); !errors.Is(err, backend.ErrLocked) {
		f.t.Errorf("exclusive TryAcquire with shared holders: %v, want ErrLocked", err)
	}
	f.awaitWaiters(key)

	x := f.start(req(key, l, "X"))
	f.awaitWaiters(key, "X")
	for _, fair := range []bool{true, false} {
		r := try(shared(req(key, l, fmt.Sprintf("T4 fair=%v", fair))))
		r.Fair = fair
		if _, err := f.b.Acquire(f.ctx(), r); !errors.Is(err, backend.ErrLocked) {
			f.t.Errorf("shared TryAcquire (fair=%v) with shared holders and a writer queued: %v, want ErrLocked", fair, err)
		}
	}
	f.awaitWaiters(key, "X")
	f.wantHolders(key, "failed shared TryAcquires", t1, t2, t3)

	f.releaseAll(t1, t2, t3)
	xc := f.got(x)
	if _, err := f.b.Acquire(f.ctx(), try(shared(req(key, l, "T5")))); !errors.Is(err, backend.ErrLocked) {
		f.t.Errorf("shared TryAcquire with an exclusive holder: %v, want ErrLocked", err)
	}
	f.awaitWaiters(key)
	f.wantHolders(key, "failed shared TryAcquire on an exclusive holder", xc)
	f.release(xc)
	f.wantFree(key, "after the failed TryAcquires' key was released (a leftover claim would hold it)")
}
