package backendtest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ash-lock/ashlock/backend"
)

// testFairFIFO queues fair waiters one after another and releases the key
// repeatedly: each release must hand the key to the next waiter in request
// order, and to that one only.
func testFairFIFO(f *fixture) {
	const key = "fifo"
	l := f.grant(holdTTL)
	holder := f.acquire(req(key, l, "H"))

	owners := []string{"W1", "W2", "W3", "W4"}
	var waiters []*pending
	var queued []backend.Waiter
	for i, o := range owners {
		waiters = append(waiters, f.start(req(key, l, o)))
		queued = f.awaitWaiters(key, owners[:i+1]...).Waiters
	}

	for i, p := range waiters {
		f.release(holder)
		holder = f.got(p)
		if i < len(queued) && holder.Token != queued[i].Token {
			f.t.Errorf("%s got token %d, but Inspect listed it with token %d", p.owner, holder.Token, queued[i].Token)
		}
		rest := waiters[i+1:]
		f.stillWaiting(fmt.Sprintf("release handed the key to %s", p.owner), rest...)
		f.wantHolder(key, holder.Token, p.owner+" woken")
		if len(rest) > 0 {
			f.awaitWaiters(key, owners[i+1:]...)
		}
	}
	f.release(holder)
	f.wantFree(key, "after the last waiter released")
}

// testNonFairYields checks that a non-fair request waits outside the queue:
// it is not listed by Inspect, and fair requests queued after it still get
// the key first; it gets the key once nobody is queued.
func testNonFairYields(f *fixture) {
	const key = "unfair"
	l := f.grant(holdTTL)
	holder := f.acquire(req(key, l, "H"))
	n := f.start(unfair(req(key, l, "N")))
	f.stillWaiting("non-fair N behind H", n)
	w1 := f.start(req(key, l, "W1"))
	f.awaitWaiters(key, "W1")
	w2 := f.start(req(key, l, "W2"))
	f.awaitWaiters(key, "W1", "W2")

	for _, w := range []*pending{w1, w2} {
		f.release(holder)
		holder = f.got(w)
		f.stillWaiting(fmt.Sprintf("fair %s queued when the key was released", w.owner), n)
	}
	f.release(holder)
	nc := f.got(n)
	if nc.Token <= holder.Token {
		f.t.Errorf("non-fair N got token %d, not above the previous holder's %d", nc.Token, holder.Token)
	}
	f.wantHolder(key, nc.Token, "N took the free key")
	f.release(nc)
}

// testCancelledWait ends waits by cancellation and by deadline, for fair
// and non-fair requests: the Acquire returns the context's error (never
// ErrLocked), its claim disappears, and the next waiter still gets the key.
func testCancelledWait(f *fixture) {
	cases := []struct {
		name     string
		fair     bool
		deadline bool // end the wait by a deadline rather than cancel
	}{
		{"FairCancelled", true, false},
		{"FairDeadline", true, true},
		{"NonFairCancelled", false, false},
		{"NonFairDeadline", false, true},
	}
	for _, c := range cases {
		f.t.Run(c.name, func(t *testing.T) {
			f := f.sub(t)
			key := "cancel/" + c.name
			l := f.grant(holdTTL)
			holder := f.acquire(req(key, l, "H"))

			r := req(key, l, "W1")
			r.Fair = c.fair
			var ctx context.Context
			var cancel context.CancelFunc
			if c.deadline {
				ctx, cancel = context.WithTimeout(t.Context(), 3*f.quiet)
			} else {
				ctx, cancel = context.WithCancel(t.Context())
			}
			w1 := f.startCtx(ctx, cancel, r)
			if c.fair && !c.deadline {
				f.awaitWaiters(key, "W1")
			}
			w2 := f.start(req(key, l, "W2"))
			if !c.deadline {
				if c.fair {
					f.awaitWaiters(key, "W1", "W2")
				} else {
					f.awaitWaiters(key, "W2")
					// Give the non-fair request, which Inspect cannot
					// show, time to reach the store before it is cancelled.
					f.stillWaiting("non-fair W1 behind H", w1)
				}
				cancel()
			}

			_, err := f.wait(w1, f.timeout)
			if want := ctx.Err(); err == nil || !errors.Is(err, want) {
				t.Errorf("ended wait returned %v, want an error wrapping %v", err, want)
			}
			if errors.Is(err, backend.ErrLocked) {
				t.Errorf("ended wait returned %v, which must not be ErrLocked", err)
			}
			f.awaitGone(key, "W1")
			f.awaitWaiters(key, "W2")

			f.release(holder)
			w2c := f.got(w2)
			f.release(w2c)
			f.wantFree(key, "after the remaining waiter released (a leftover claim would hold it)")
		})
	}
}

// testTryAcquire checks that a non-waiting request on a held key fails at
// once with ErrLocked, fair or not, and leaves no claim that could later
// take the key.
func testTryAcquire(f *fixture) {
	const key = "try"
	l := f.grant(holdTTL)
	holder := f.acquire(req(key, l, "H"))
	for _, fair := range []bool{true, false} {
		r := try(req(key, l, fmt.Sprintf("T fair=%v", fair)))
		r.Fair = fair
		_, err := f.b.Acquire(f.ctx(), r)
		if !errors.Is(err, backend.ErrLocked) {
			f.t.Errorf("TryAcquire (fair=%v) on a held key: %v, want ErrLocked", fair, err)
		}
	}
	f.awaitWaiters(key) // nobody queued

	w := f.start(req(key, l, "W"))
	f.awaitWaiters(key, "W")
	if _, err := f.b.Acquire(f.ctx(), try(req(key, l, "T2"))); !errors.Is(err, backend.ErrLocked) {
		f.t.Errorf("TryAcquire on a key with a holder and a waiter: %v, want ErrLocked", err)
	}
	f.awaitWaiters(key, "W")

	f.release(holder)
	wc := f.got(w)
	f.release(wc)
	f.wantFree(key, "after holder and waiter released (a failed TryAcquire must leave nothing)")

	tc := f.acquire(try(req(key, l, "T3")))
	f.wantHolder(key, tc.Token, "TryAcquire on a free key")
	f.release(tc)
}
