package memory_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// Inside a synctest bubble, synctest.Wait returns once every goroutine is
// blocked, so "the other waiters did not return" is checked exactly, not
// by waiting a while.

func TestReleaseWakesOnlyTheNextFairWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		holder := mustAcquire(t, b, request("k", l, "H"))
		var ws []*bg
		for _, o := range []string{"W1", "W2", "W3"} {
			ws = append(ws, start(t.Context(), b, request("k", l, o)))
			synctest.Wait()
		}
		for i, w := range ws {
			mustRelease(t, b, holder)
			synctest.Wait()
			for j, other := range ws[i+1:] {
				if other.returned() {
					t.Fatalf("release %d woke waiter %d as well as waiter %d", i, i+1+j, i)
				}
			}
			c, err := w.wait(t)
			if err != nil {
				t.Fatalf("waiter %d: %v", i, err)
			}
			if c.Token <= holder.Token {
				t.Errorf("waiter %d token %d, not above %d", i, c.Token, holder.Token)
			}
			holder = c
		}
		mustRelease(t, b, holder)
	})
}

func TestNonFairWaitersYieldAndWakeOneAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		holder := mustAcquire(t, b, request("k", l, "H"))
		unfair := func(o string) backend.AcquireRequest { r := request("k", l, o); r.Fair = false; return r }
		n1 := start(t.Context(), b, unfair("N1"))
		n2 := start(t.Context(), b, unfair("N2"))
		synctest.Wait()
		w := start(t.Context(), b, request("k", l, "W"))
		synctest.Wait()
		if got := inspect(t, b, "k").Waiters; len(got) != 1 || got[0].Owner != "W" {
			t.Fatalf("Inspect waiters %v, want only the fair W (non-fair requests are not queued)", got)
		}

		mustRelease(t, b, holder)
		synctest.Wait()
		if n1.returned() || n2.returned() {
			t.Fatal("a non-fair request took the key while a fair one was queued")
		}
		wc, err := w.wait(t)
		if err != nil {
			t.Fatal(err)
		}

		mustRelease(t, b, wc)
		synctest.Wait()
		if n1.returned() == n2.returned() {
			t.Fatalf("after a release with two non-fair waiters: N1 returned %v, N2 returned %v; want exactly one",
				n1.returned(), n2.returned())
		}
		first, second := n1, n2
		if n2.returned() {
			first, second = n2, n1
		}
		fc, err := first.wait(t)
		if err != nil {
			t.Fatal(err)
		}
		if fc.Token <= wc.Token {
			t.Errorf("non-fair holder token %d, not above %d", fc.Token, wc.Token)
		}
		mustRelease(t, b, fc)
		sc, err := second.wait(t)
		if err != nil {
			t.Fatal(err)
		}
		mustRelease(t, b, sc)
	})
}

func TestTryAcquire(t *testing.T) {
	tests := []struct {
		name string
		fair bool
	}{{"Fair", true}, {"NonFair", false}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t)
			l := grant(t, b, time.Hour)
			r := request("k", l, "T")
			r.Wait, r.Fair = false, tt.fair
			c := mustAcquire(t, b, r)
			r2 := r
			r2.ID = "other"
			if _, err := b.Acquire(t.Context(), r2); !errors.Is(err, backend.ErrLocked) {
				t.Errorf("second TryAcquire: %v, want ErrLocked", err)
			}
			mustRelease(t, b, c)
			if info := inspect(t, b, "k"); info.Held || len(info.Waiters) != 0 {
				t.Errorf("after release: %+v, want free", info)
			}
		})
	}
}

func TestCancelledWaitHandsTheKeyOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		holder := mustAcquire(t, b, request("k", l, "H"))
		ctx, cancel := context.WithCancelCause(t.Context())
		w1 := start(ctx, b, request("k", l, "W1"))
		synctest.Wait()
		w2 := start(t.Context(), b, request("k", l, "W2"))
		synctest.Wait()

		cause := errors.New("caller gave up")
		cancel(cause)
		_, err := w1.wait(t)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) || errors.Is(err, backend.ErrLocked) {
			t.Errorf("cancelled wait: %v, want context.Canceled joined with the cause, not ErrLocked", err)
		}
		if got := inspect(t, b, "k").Waiters; len(got) != 1 || got[0].Owner != "W2" {
			t.Errorf("waiters after cancel: %v, want [W2]", got)
		}
		mustRelease(t, b, holder)
		c, err := w2.wait(t)
		if err != nil {
			t.Fatal(err)
		}
		mustRelease(t, b, c)
	})
}

func TestDeadlineWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		holder := mustAcquire(t, b, request("k", l, "H"))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := b.Acquire(ctx, request("k", l, "W"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire past its deadline: %v, want DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("waited %v, want exactly the 1s deadline", waited)
		}
		mustRelease(t, b, holder)
		if info := inspect(t, b, "k"); info.Held {
			t.Errorf("timed-out claim holds the key: %+v", info)
		}
	})
}

func TestEndedContextFailsAtOnce(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls := []struct {
		name string
		call func() error
	}{
		{"Grant", func() error { _, err := b.Grant(ctx, time.Second); return err }},
		{"KeepAlive", func() error { _, err := b.KeepAlive(ctx, l.ID); return err }},
		{"Acquire", func() error { _, err := b.Acquire(ctx, request("k", l, "A")); return err }},
		{"Inspect", func() error { _, err := b.Inspect(ctx, "k"); return err }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, context.Canceled) {
				t.Errorf("%s with an ended context: %v, want context.Canceled", c.name, err)
			}
		})
	}
	if info := inspect(t, b, "k"); info.Held {
		t.Errorf("Acquire with an ended context left a holder: %+v", info)
	}
	// Release and Revoke never block, so they complete regardless.
	c := mustAcquire(t, b, request("k", l, "A"))
	if err := b.Release(ctx, c); err != nil {
		t.Errorf("Release with an ended context: %v, want nil", err)
	}
	if err := b.Revoke(ctx, l.ID); err != nil {
		t.Errorf("Revoke with an ended context: %v, want nil", err)
	}
}

func TestTokensAreGlobalAndIncreasing(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	var last uint64
	for i := range 20 {
		key := []string{"a", "b", "a/b"}[i%3]
		c := mustAcquire(t, b, request(key, l, "x"))
		if c.Token <= last {
			t.Fatalf("acquisition %d on %q: token %d, not above %d", i, key, c.Token, last)
		}
		last = c.Token
		mustRelease(t, b, c)
	}
}

func TestInspectReportsHolderAndQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		before := time.Now()
		time.Sleep(time.Second)
		h := mustAcquire(t, b, request("k", l, "holder"))
		if want := before.Add(time.Second); !h.AcquiredAt.Equal(want) {
			t.Errorf("AcquiredAt %v, want %v", h.AcquiredAt, want)
		}
		start(t.Context(), b, request("k", l, "w1"))
		synctest.Wait()
		start(t.Context(), b, request("k", l, "w2"))
		synctest.Wait()
		info := inspect(t, b, "k")
		if !info.Held || info.Owner != "holder" || info.Token != h.Token || !info.AcquiredAt.Equal(h.AcquiredAt) {
			t.Errorf("Inspect holder fields %+v, want holder's", info)
		}
		if len(info.Waiters) != 2 || info.Waiters[0].Owner != "w1" || info.Waiters[1].Owner != "w2" ||
			info.Waiters[0].Token <= h.Token || info.Waiters[1].Token <= info.Waiters[0].Token {
			t.Errorf("Inspect waiters %+v, want w1 then w2 with increasing tokens above %d", info.Waiters, h.Token)
		}
		// The waiters end with the bubble's context.
	})
}
