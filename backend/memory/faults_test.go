package memory_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

func TestFailRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, 10*time.Second)
		lost := newLost()
		r := request("k", l, "A")
		r.OnLost = backend.LossFunc(lost.onLost)
		mustAcquire(t, b, r)

		injected := errors.New("network down")
		b.FailRenewals(injected)
		time.Sleep(5 * time.Second)
		if _, err := b.KeepAlive(t.Context(), l.ID); !errors.Is(err, injected) {
			t.Fatalf("KeepAlive with failures injected: %v, want the injected error", err)
		}
		time.Sleep(5 * time.Second) // the failed renewal did not extend the lease
		if cause := lost.await(t); !errors.Is(cause, backend.ErrLeaseExpired) {
			t.Errorf("OnLost: %v, want ErrLeaseExpired", cause)
		}

		b.FailRenewals(nil)
		l2 := grant(t, b, 10*time.Second)
		if ttl, err := b.KeepAlive(t.Context(), l2.ID); err != nil || ttl != 10*time.Second {
			t.Errorf("KeepAlive after FailRenewals(nil): %v, %v; want 10s, nil", ttl, err)
		}
	})
}

func TestDelayRenewals(t *testing.T) {
	tests := []struct {
		name     string
		ttl      time.Duration
		delay    time.Duration
		ctxLimit time.Duration // 0: no deadline on the KeepAlive
		wantErr  error         // nil: renewed
		wantLive bool          // lease still live right after KeepAlive returns
	}{
		{"HangThenRenew", 10 * time.Second, 3 * time.Second, 0, nil, true},
		{"ContextEndsFirst", 10 * time.Second, time.Hour, 2 * time.Second, context.DeadlineExceeded, true},
		{"ContextEndsFirstIsUnavailable", 10 * time.Second, time.Hour, 2 * time.Second, backend.ErrUnavailable, true},
		{"LeaseExpiresDuringHang", 10 * time.Second, 11 * time.Second, 0, backend.ErrLeaseExpired, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBackend(t)
				l := grant(t, b, tt.ttl)
				b.DelayRenewals(tt.delay)
				ctx := t.Context()
				if tt.ctxLimit > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.ctxLimit)
					defer cancel()
				}
				started := time.Now()
				_, err := b.KeepAlive(ctx, l.ID)
				took := time.Since(started)
				if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("KeepAlive: %v, want %v", err, tt.wantErr)
				}
				wantTook := tt.delay
				if tt.ctxLimit > 0 {
					wantTook = tt.ctxLimit
				}
				if took != wantTook {
					t.Errorf("KeepAlive took %v, want %v", took, wantTook)
				}
				b.DelayRenewals(0)
				_, err = b.KeepAlive(t.Context(), l.ID)
				if live := err == nil; live != tt.wantLive {
					t.Errorf("lease live after the delayed renewal: %v (%v), want %v", live, err, tt.wantLive)
				}
			})
		})
	}
}

func TestDelayedRenewalCountsFromArrival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, 10*time.Second)
		lost := newLost()
		r := request("k", l, "A")
		r.OnLost = backend.LossFunc(lost.onLost)
		mustAcquire(t, b, r)
		b.DelayRenewals(4 * time.Second)
		if _, err := b.KeepAlive(t.Context(), l.ID); err != nil { // arrives at t=4s
			t.Fatal(err)
		}
		time.Sleep(10*time.Second - time.Nanosecond) // t=14s-1ns
		synctest.Wait()
		if lost.count() != 0 {
			t.Fatal("lease expired before the delayed renewal's deadline")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if lost.count() != 1 {
			t.Fatal("lease did not expire 10s after the delayed renewal arrived")
		}
	})
}

func TestExpireLeaseAndExpireKey(t *testing.T) {
	tests := []struct {
		name   string
		expire func(b *memory.Backend, pooled backend.LeaseID) bool
	}{
		{"ExpireLease", func(b *memory.Backend, pooled backend.LeaseID) bool { return b.ExpireLease(pooled) }},
		{"ExpireKey", func(b *memory.Backend, _ backend.LeaseID) bool { return b.ExpireKey("k1") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBackend(t)
				pooled := grant(t, b, time.Hour)
				other := grant(t, b, time.Hour)
				lost1, lost2 := newLost(), newLost()
				r1 := request("k1", pooled, "A")
				r1.OnLost = backend.LossFunc(lost1.onLost)
				c1 := mustAcquire(t, b, r1)
				r2 := request("k2", pooled, "B")
				r2.OnLost = backend.LossFunc(lost2.onLost)
				mustAcquire(t, b, r2)
				next := start(t.Context(), b, request("k1", other, "next"))
				synctest.Wait()

				if !tt.expire(b, pooled.ID) {
					t.Fatal("hook reported nothing to expire")
				}
				// Both claims go: a store expires leases, not single claims.
				for name, l := range map[string]*lost{"k1": lost1, "k2 (same lease)": lost2} {
					cause := l.await(t)
					if !errors.Is(cause, backend.ErrLeaseExpired) || !strings.Contains(cause.Error(), "expired") {
						t.Errorf("OnLost of %s: %v, want an expiry wrapping ErrLeaseExpired", name, cause)
					}
				}
				nc, err := next.wait(t)
				if err != nil || nc.Token <= c1.Token {
					t.Errorf("next holder: token %d, %v; want a token above %d", nc.Token, err, c1.Token)
				}
				if _, err := b.KeepAlive(t.Context(), pooled.ID); !errors.Is(err, backend.ErrLeaseExpired) {
					t.Errorf("KeepAlive of the expired lease: %v, want ErrLeaseExpired", err)
				}
				if b.ExpireLease(pooled.ID) {
					t.Error("ExpireLease of an ended lease reported expiring it")
				}
				if b.ExpireKey("free key") {
					t.Error("ExpireKey of a free key reported expiring something")
				}
			})
		})
	}
}

func TestDeleteClaim(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	lost1, lost2 := newLost(), newLost()
	r1 := request("k1", l, "A")
	r1.OnLost = backend.LossFunc(lost1.onLost)
	c1 := mustAcquire(t, b, r1)
	r2 := request("k2", l, "B")
	r2.OnLost = backend.LossFunc(lost2.onLost)
	c2 := mustAcquire(t, b, r2)

	if !b.DeleteClaim("k1") {
		t.Fatal("DeleteClaim of a held key reported nothing deleted")
	}
	if cause := lost1.await(t); !errors.Is(cause, backend.ErrLeaseExpired) {
		t.Errorf("OnLost after DeleteClaim: %v, want ErrLeaseExpired", cause)
	}
	if info := inspect(t, b, "k1"); info.Held {
		t.Errorf("k1 still held after DeleteClaim: %+v", info)
	}
	if info := inspect(t, b, "k2"); info.Token != c2.Token {
		t.Errorf("k2 on the same lease: %+v, want still held by token %d", info, c2.Token)
	}
	if _, err := b.KeepAlive(t.Context(), l.ID); err != nil {
		t.Errorf("KeepAlive after DeleteClaim: %v, want the lease untouched", err)
	}
	if err := b.Release(t.Context(), c1); err != nil {
		t.Errorf("Release of the deleted claim: %v, want nil", err)
	}
	if b.DeleteClaim("k1") {
		t.Error("DeleteClaim of a free key reported deleting something")
	}
	if lost2.count() != 0 {
		t.Error("OnLost of the other claim on the lease was called")
	}
}

// A claim lost between becoming holder and Acquire returning fails that
// Acquire; OnLost is only for claims the caller has.
func TestDeleteClaimBeforeAcquireReturns(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	lost := newLost()
	r := request("k", l, "A")
	r.OnLost = backend.LossFunc(lost.onLost)
	r.Stamp = func(prev backend.Timestamp) (backend.Timestamp, error) {
		b.DeleteClaim("k") // the operator strikes while the claim is being stamped
		return backend.Timestamp{WallTime: 1}, nil
	}
	if _, err := b.Acquire(t.Context(), r); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Errorf("Acquire whose claim was deleted before it returned: %v, want ErrLeaseExpired", err)
	}
	if lost.count() != 0 {
		t.Error("OnLost called for a claim Acquire never returned")
	}
	var got backend.Timestamp
	r2 := request("k", l, "B")
	r2.Stamp = func(prev backend.Timestamp) (backend.Timestamp, error) { got = prev; return prev, nil }
	mustAcquire(t, b, r2)
	if !got.IsZero() {
		t.Errorf("next holder given stamp %v, want zero: a lost claim's stamp was recorded", got)
	}
}
