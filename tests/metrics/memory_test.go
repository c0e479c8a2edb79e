package metrics_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// With a 1s TTL the watchdog renews every third of a second and trusts a
// lease until the last acknowledged send + TTL - max(100ms, TTL/10). The
// memory backend answers at once, so on the bubble's fake clock every
// renewal confirms with exactly ttl - margin = 900ms left.
const (
	ttl        = time.Second
	margin     = 100 * time.Millisecond
	waitBudget = time.Minute // bounds every wait, in the bubble's fake time
)

var (
	quiet       = slog.New(slog.DiscardHandler)
	errInjected = errors.New("injected renewal failure")
)

// bubbleBackend makes a memory backend in the current synctest bubble,
// closed after everything registered later (clients, guards).
func bubbleBackend(t *testing.T) *memory.Backend {
	t.Helper()
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// bubbleClient makes a client on b that records to m (no metrics if m is
// nil), closed when the test ends.
func bubbleClient(t *testing.T, b backend.Backend, m *meter) *ashlock.LockClient {
	t.Helper()
	cfg := ashlock.LockConfig{DefaultTTL: ttl, Logger: quiet}
	if m != nil {
		cfg.MeterProvider = m.mp
	}
	c, err := ashlock.ConnectWith(t.Context(), cfg, b)
	if err != nil {
		t.Fatalf("ConnectWith: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// awaitDone waits, bounded by waitBudget of fake time, for g to end, then
// lets the bubble settle: the client records the end of a guard after
// closing Done.
func awaitDone(t *testing.T, g *ashlock.Guard) {
	t.Helper()
	select {
	case <-g.Done():
	case <-time.After(waitBudget):
		t.Fatalf("guard on %q still valid after %v", g.Key(), waitBudget)
	}
	synctest.Wait()
}

// acquireAll acquires keys in order on c and returns the guards.
func acquireAll(t *testing.T, c *ashlock.LockClient, keys ...string) []*ashlock.Guard {
	t.Helper()
	out := make([]*ashlock.Guard, 0, len(keys))
	for _, k := range keys {
		g, err := c.Lock(k).Acquire(t.Context())
		if err != nil {
			t.Fatalf("Acquire(%q): %v", k, err)
		}
		out = append(out, g)
	}
	// Reachable until the test ends: a Guard dropped without Unlock is
	// released, which would change the held gauge.
	t.Cleanup(func() { runtime.KeepAlive(out) })
	return out
}

var outcomes = []string{"acquired", "locked", "cancelled", "lease_expired", "error"}

func TestAcquireOutcomesAndDurations(t *testing.T) {
	tests := []struct {
		name string
		// run makes one acquisition on c; holder is another client on the
		// same backend, recording nowhere.
		run      func(t *testing.T, c, holder *ashlock.LockClient) error
		wantErr  error
		outcome  string        // the one outcome recorded, once
		took     time.Duration // the acquisition's duration
		waitTook time.Duration // the wait.duration sample; -1: none recorded
	}{
		{
			name: "Acquire of a free key",
			run: func(t *testing.T, c, _ *ashlock.LockClient) error {
				g, err := c.Lock("k").Acquire(t.Context())
				t.Cleanup(func() { runtime.KeepAlive(g) })
				return err
			},
			outcome:  "acquired",
			waitTook: 0,
		},
		{
			name: "TryAcquire of a free key",
			run: func(t *testing.T, c, _ *ashlock.LockClient) error {
				g, err := c.Lock("k").TryAcquire(t.Context())
				t.Cleanup(func() { runtime.KeepAlive(g) })
				return err
			},
			outcome:  "acquired",
			waitTook: -1,
		},
		{
			name: "TryAcquire of a held key",
			run: func(t *testing.T, c, holder *ashlock.LockClient) error {
				acquireAll(t, holder, "k")
				_, err := c.Lock("k").TryAcquire(t.Context())
				return err
			},
			wantErr:  ashlock.ErrLocked,
			outcome:  "locked",
			waitTook: -1,
		},
		{
			name: "Acquire behind a holder that unlocks after 3s",
			run: func(t *testing.T, c, holder *ashlock.LockClient) error {
				g := acquireAll(t, holder, "k")[0]
				go func() {
					time.Sleep(3 * time.Second)
					_ = g.Unlock(context.Background())
				}()
				g2, err := c.Lock("k").Acquire(t.Context())
				t.Cleanup(func() { runtime.KeepAlive(g2) })
				return err
			},
			outcome:  "acquired",
			took:     3 * time.Second,
			waitTook: 3 * time.Second,
		},
		{
			name: "Acquire that times out after 2s",
			run: func(t *testing.T, c, holder *ashlock.LockClient) error {
				acquireAll(t, holder, "k")
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				defer cancel()
				_, err := c.Lock("k").Acquire(ctx)
				return err
			},
			wantErr:  context.DeadlineExceeded,
			outcome:  "cancelled",
			took:     2 * time.Second,
			waitTook: -1,
		},
		{
			name: "Acquire cancelled after 1s",
			run: func(t *testing.T, c, holder *ashlock.LockClient) error {
				acquireAll(t, holder, "k")
				ctx, cancel := context.WithCancel(t.Context())
				time.AfterFunc(time.Second, cancel)
				_, err := c.Lock("k").Acquire(ctx)
				return err
			},
			wantErr:  context.Canceled,
			outcome:  "cancelled",
			took:     time.Second,
			waitTook: -1,
		},
		{
			name: "Acquire ended by Close after 1s",
			run: func(t *testing.T, c, holder *ashlock.LockClient) error {
				acquireAll(t, holder, "k")
				time.AfterFunc(time.Second, func() { _ = c.Close(context.Background()) })
				_, err := c.Lock("k").Acquire(t.Context())
				return err
			},
			wantErr:  ashlock.ErrClosed,
			outcome:  "error",
			took:     time.Second,
			waitTook: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMeter(t)
				b := bubbleBackend(t)
				c := bubbleClient(t, b, m)
				holder := bubbleClient(t, b, nil)

				err := tt.run(t, c, holder)
				switch {
				case tt.wantErr == nil && err != nil:
					t.Fatalf("acquisition failed: %v", err)
				case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
					t.Fatalf("acquisition error = %v, want %v", err, tt.wantErr)
				}

				s := m.collect(t)
				for _, o := range outcomes {
					dp := s.hist(t, acquireDuration, outcome(o))
					want := uint64(0)
					if o == tt.outcome {
						want = 1
					}
					if dp.Count != want {
						t.Errorf("%s{outcome=%s} count = %d, want %d", acquireDuration, o, dp.Count, want)
					}
					if o == tt.outcome && dp.Sum != tt.took.Seconds() {
						t.Errorf("%s{outcome=%s} = %vs, want %vs", acquireDuration, o, dp.Sum, tt.took.Seconds())
					}
				}
				w := s.hist(t, waitDuration, noAttrs)
				switch {
				case tt.waitTook < 0 && w.Count != 0:
					t.Errorf("%s recorded %d samples, want none", waitDuration, w.Count)
				case tt.waitTook >= 0 && (w.Count != 1 || w.Sum != tt.waitTook.Seconds()):
					t.Errorf("%s = %d samples summing to %vs, want 1 of %vs", waitDuration, w.Count, w.Sum, tt.waitTook.Seconds())
				}
			})
		})
	}
}

func TestHeldGoesBackToZero(t *testing.T) {
	keys := []string{"a", "a/b", "orders/42"}
	tests := []struct {
		name string
		end  func(t *testing.T, c *ashlock.LockClient, b *memory.Backend, gs []*ashlock.Guard)
	}{
		{
			name: "Unlock",
			end: func(t *testing.T, _ *ashlock.LockClient, _ *memory.Backend, gs []*ashlock.Guard) {
				for _, g := range gs {
					if err := g.Unlock(t.Context()); err != nil {
						t.Fatalf("Unlock(%q): %v", g.Key(), err)
					}
				}
			},
		},
		{
			name: "Unlock twice",
			end: func(t *testing.T, _ *ashlock.LockClient, _ *memory.Backend, gs []*ashlock.Guard) {
				for range 2 {
					for _, g := range gs {
						if err := g.Unlock(t.Context()); err != nil {
							t.Fatalf("Unlock(%q): %v", g.Key(), err)
						}
					}
				}
			},
		},
		{
			name: "Close",
			end: func(t *testing.T, c *ashlock.LockClient, _ *memory.Backend, _ []*ashlock.Guard) {
				if err := c.Close(t.Context()); err != nil {
					t.Fatalf("Close: %v", err)
				}
			},
		},
		{
			name: "poisoned by failing renewals",
			end: func(t *testing.T, _ *ashlock.LockClient, b *memory.Backend, gs []*ashlock.Guard) {
				b.FailRenewals(errInjected)
				for _, g := range gs {
					awaitDone(t, g)
				}
			},
		},
		{
			name: "poisoned, then unlocked",
			end: func(t *testing.T, _ *ashlock.LockClient, b *memory.Backend, gs []*ashlock.Guard) {
				b.FailRenewals(errInjected)
				for _, g := range gs {
					awaitDone(t, g)
					if err := g.Unlock(t.Context()); !errors.Is(err, ashlock.ErrLeaseExpired) {
						t.Errorf("Unlock(%q) of a poisoned guard = %v, want ErrLeaseExpired", g.Key(), err)
					}
				}
			},
		},
		{
			name: "poisoned, then closed",
			end: func(t *testing.T, c *ashlock.LockClient, b *memory.Backend, gs []*ashlock.Guard) {
				b.FailRenewals(errInjected)
				for _, g := range gs {
					awaitDone(t, g)
				}
				if err := c.Close(t.Context()); err != nil {
					t.Fatalf("Close: %v", err)
				}
			},
		},
		{
			name: "claims deleted by an operator",
			end: func(t *testing.T, _ *ashlock.LockClient, b *memory.Backend, gs []*ashlock.Guard) {
				for _, g := range gs {
					b.DeleteClaim(g.Key())
					awaitDone(t, g)
				}
			},
		},
		{
			name: "lease expired in the store",
			end: func(t *testing.T, _ *ashlock.LockClient, b *memory.Backend, gs []*ashlock.Guard) {
				c, err := gs[0].Claim()
				if err != nil {
					t.Fatal(err)
				}
				b.ExpireLease(c.Lease)
				for _, g := range gs {
					awaitDone(t, g)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMeter(t)
				b := bubbleBackend(t)
				c := bubbleClient(t, b, m)
				gs := acquireAll(t, c, keys...)
				if got := m.collect(t).sum(t, held, noAttrs); got != int64(len(keys)) {
					t.Fatalf("%s = %d with %d guards held", held, got, len(keys))
				}
				tt.end(t, c, b, gs)
				synctest.Wait()
				if got := m.collect(t).sum(t, held, noAttrs); got != 0 {
					t.Errorf("%s = %d after the guards ended, want 0", held, got)
				}
				// Nothing decrements it later either: renewals, lingering
				// leases and their revokes run their course.
				time.Sleep(5 * ttl)
				synctest.Wait()
				if got := m.collect(t).sum(t, held, noAttrs); got != 0 {
					t.Errorf("%s = %d once the client settled, want 0", held, got)
				}
			})
		})
	}
}

func TestHeldDuringDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMeter(t)
		c := bubbleClient(t, bubbleBackend(t), m)
		var inside int64 = -1
		err := c.Lock("k").Do(t.Context(), func(context.Context, uint64) error {
			inside = m.collect(t).sum(t, held, noAttrs)
			time.Sleep(2 * time.Second)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		s := m.collect(t)
		if inside != 1 {
			t.Errorf("%s = %d inside Do, want 1", held, inside)
		}
		if got := s.sum(t, held, noAttrs); got != 0 {
			t.Errorf("%s = %d after Do, want 0", held, got)
		}
		if h := s.hist(t, holdDuration, noAttrs); h.Count != 1 || h.Sum != 2 {
			t.Errorf("%s = %d samples summing to %vs, want one of 2s", holdDuration, h.Count, h.Sum)
		}
	})
}

func TestHoldDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMeter(t)
		c := bubbleClient(t, bubbleBackend(t), m)
		for _, d := range []time.Duration{500 * time.Millisecond, 5 * time.Second} {
			g := acquireAll(t, c, "k")[0]
			time.Sleep(d)
			if err := g.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		h := m.collect(t).hist(t, holdDuration, noAttrs)
		if h.Count != 2 || h.Sum != 5.5 {
			t.Errorf("%s = %d samples summing to %vs, want 2 summing to 5.5s", holdDuration, h.Count, h.Sum)
		}
		if lo, _ := h.Min.Value(); lo != 0.5 {
			t.Errorf("%s min = %vs, want 0.5s", holdDuration, lo)
		}
		if hi, _ := h.Max.Value(); hi != 5 {
			t.Errorf("%s max = %vs, want 5s", holdDuration, hi)
		}
	})
}

func TestRenewalsAndMargin(t *testing.T) {
	tests := []struct {
		name  string
		fault func(b *memory.Backend, lease backend.LeaseID)
		// ok is the least number of successful renewals in 2s; every one
		// of them must report exactly marginLeft.
		ok         int64
		marginLeft time.Duration
		errors     bool  // some renewals failed with "error"
		expired    int64 // renewals refused with "lease_expired"
		lost       int64 // leases poisoned
	}{
		{
			name:       "store answering at once",
			fault:      func(*memory.Backend, backend.LeaseID) {},
			ok:         5,
			marginLeft: ttl - margin,
		},
		{
			name:       "renewals delayed 200ms",
			fault:      func(b *memory.Backend, _ backend.LeaseID) { b.DelayRenewals(200 * time.Millisecond) },
			ok:         4,
			marginLeft: ttl - margin - 200*time.Millisecond,
		},
		{
			name:   "renewals failing",
			fault:  func(b *memory.Backend, _ backend.LeaseID) { b.FailRenewals(errInjected) },
			errors: true,
			lost:   1,
		},
		{
			name:   "renewals failing as unreachable",
			fault:  func(b *memory.Backend, _ backend.LeaseID) { b.FailRenewals(backend.ErrUnavailable) },
			errors: true,
			lost:   1,
		},
		{
			name:    "renewals refused: lease expired",
			fault:   func(b *memory.Backend, _ backend.LeaseID) { b.FailRenewals(backend.ErrLeaseExpired) },
			expired: 1,
			lost:    1,
		},
		{
			name:    "lease expired in the store",
			fault:   func(b *memory.Backend, id backend.LeaseID) { b.ExpireLease(id) },
			expired: 1,
			lost:    1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMeter(t)
				b := bubbleBackend(t)
				c := bubbleClient(t, b, m)
				gs := acquireAll(t, c, "a", "b") // two guards, one pooled lease
				claim, err := gs[0].Claim()
				if err != nil {
					t.Fatal(err)
				}
				tt.fault(b, claim.Lease)
				time.Sleep(2 * time.Second)
				synctest.Wait()

				s := m.collect(t)
				ok := s.sum(t, renewals, outcome("ok"))
				if ok < tt.ok || (tt.ok == 0 && ok != 0) {
					t.Errorf("%s{outcome=ok} = %d, want at least %d", renewals, ok, tt.ok)
				}
				if got := s.sum(t, renewals, outcome("error")); (got > 0) != tt.errors {
					t.Errorf("%s{outcome=error} = %d, want errors: %v", renewals, got, tt.errors)
				}
				if got := s.sum(t, renewals, outcome("lease_expired")); got != tt.expired {
					t.Errorf("%s{outcome=lease_expired} = %d, want %d", renewals, got, tt.expired)
				}
				if got := s.sum(t, leasesLost, noAttrs); got != tt.lost {
					t.Errorf("%s = %d, want %d", leasesLost, got, tt.lost)
				}

				mg := s.hist(t, renewMargin, noAttrs)
				if int64(mg.Count) != ok {
					t.Errorf("%s has %d samples for %d successful renewals", renewMargin, mg.Count, ok)
				}
				if ok > 0 {
					lo, _ := mg.Min.Value()
					hi, _ := mg.Max.Value()
					if want := tt.marginLeft.Seconds(); lo != want || hi != want {
						t.Errorf("%s in [%v, %v]s, want every sample %vs", renewMargin, lo, hi, want)
					}
					if lo <= 0 {
						t.Errorf("%s min = %vs: a confirmed renewal must leave time on the lease", renewMargin, lo)
					}
				}
			})
		})
	}
}

func TestLeasesLostCountsLeasesNotGuards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMeter(t)
		b := bubbleBackend(t)
		c := bubbleClient(t, b, m)
		ctx := t.Context()
		// Three guards on two pooled leases (one per TTL).
		gs := acquireAll(t, c, "a", "b")
		g3, err := c.Lock("c").WithTTL(2 * ttl).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g3)
		b.FailRenewals(errInjected)
		for _, g := range gs {
			awaitDone(t, g)
		}
		s := m.collect(t)
		if got := s.sum(t, leasesLost, noAttrs); got != 2 {
			t.Errorf("%s = %d after losing 2 leases under 3 guards, want 2", leasesLost, got)
		}
		if got := s.sum(t, held, noAttrs); got != 0 {
			t.Errorf("%s = %d after every guard was poisoned, want 0", held, got)
		}
	})
}

func TestDeletedClaimLosesNoLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMeter(t)
		b := bubbleBackend(t)
		c := bubbleClient(t, b, m)
		gs := acquireAll(t, c, "a", "b")
		b.DeleteClaim("a")
		awaitDone(t, gs[0])
		time.Sleep(2 * time.Second)
		s := m.collect(t)
		if got := s.sum(t, leasesLost, noAttrs); got != 0 {
			t.Errorf("%s = %d after one claim was deleted and its lease kept, want 0", leasesLost, got)
		}
		if got := s.sum(t, held, noAttrs); got != 1 {
			t.Errorf("%s = %d with one of two guards poisoned, want 1", held, got)
		}
		if err := gs[1].Err(); err != nil {
			t.Errorf("the other guard on the lease: Err = %v, want nil", err)
		}
	})
}

func TestHistogramBucketsAreInSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMeter(t)
		c := bubbleClient(t, bubbleBackend(t), m)
		g := acquireAll(t, c, "k")[0]
		time.Sleep(ttl) // a few renewals
		if err := g.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		s := m.collect(t)
		points := map[string]attribute.Set{
			acquireDuration: outcome("acquired"),
			waitDuration:    noAttrs,
			holdDuration:    noAttrs,
			renewMargin:     noAttrs,
		}
		for name, attrs := range points {
			dp := s.hist(t, name, attrs)
			if dp.Count == 0 {
				t.Errorf("%s: nothing recorded", name)
				continue
			}
			// The SDK's default bounds (0, 5, 10, 25 ... 10000) are meant
			// for milliseconds: one bound under 10s. A seconds histogram
			// needs sub-second resolution.
			var under10s int
			for _, bnd := range dp.Bounds {
				if bnd > 0 && bnd < 10 {
					under10s++
				}
			}
			if len(dp.Bounds) == 0 || dp.Bounds[0] <= 0 || dp.Bounds[0] > 0.01 || under10s < 6 {
				t.Errorf("%s bucket bounds %v: want the first in (0, 10ms] and at least 6 under 10s", name, dp.Bounds)
			}
		}
	})
}

func TestNoLockKeyInAnyAttribute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMeter(t)
		b := bubbleBackend(t)
		c := bubbleClient(t, b, m)
		holder := bubbleClient(t, b, nil)
		ctx := t.Context()
		const (
			keyA  = "tenant-7f3a/orders/4711"
			keyB  = "tenant-7f3a/invoices/0042"
			keyC  = "tenant-7f3a/jobs/nightly"
			owner = "owner-label-c41d"
		)

		// Every instrument and every outcome, on distinctive keys.
		g, err := c.Lock(keyA).WithOwner(owner).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl) // renewals and their margins
		if err := g.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		acquireAll(t, holder, keyB)
		if _, err := c.Lock(keyB).TryAcquire(ctx); !errors.Is(err, ashlock.ErrLocked) {
			t.Fatalf("TryAcquire of a held key = %v, want ErrLocked", err)
		}
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = c.Lock(keyB).WithOwner(owner).Acquire(tctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("timed-out Acquire = %v, want DeadlineExceeded", err)
		}
		g, err = c.Lock(keyC).WithOwner(owner).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.FailRenewals(errInjected)
		awaitDone(t, g)
		b.FailRenewals(backend.ErrLeaseExpired)
		g, err = c.Lock(keyC).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		awaitDone(t, g)

		s := m.collect(t)
		for _, name := range []string{acquireDuration, waitDuration, holdDuration, held, renewals, leasesLost, renewMargin} {
			if _, ok := s[name]; !ok {
				t.Errorf("%s: nothing recorded; the workload should exercise every instrument", name)
			}
		}
		for _, o := range []string{"acquired", "locked", "cancelled"} {
			if s.hist(t, acquireDuration, outcome(o)).Count == 0 {
				t.Errorf("%s{outcome=%s}: nothing recorded", acquireDuration, o)
			}
		}
		for _, o := range []string{"ok", "error", "lease_expired"} {
			if s.sum(t, renewals, outcome(o)) == 0 {
				t.Errorf("%s{outcome=%s}: nothing recorded", renewals, o)
			}
		}
		assertNoLockKeys(t, s, keyA, keyB, keyC, owner, "tenant-7f3a")
	})
}
