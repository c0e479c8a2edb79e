package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// These tests look inside the Backend for properties a caller cannot see:
// which requests were woken, and that nothing is left in its maps.

func internalRequest(key string, l backend.Lease, fair bool) backend.AcquireRequest {
	return backend.AcquireRequest{Key: key, ID: key + fmt.Sprint(time.Now().UnixNano()), Lease: l.ID, Wait: true, Fair: fair}
}

// admit is Acquire's admission of a valid request, for tests that drive a
// claim by hand.
func (b *Backend) admit(req *backend.AcquireRequest, held *backend.Claim) (*claim, chan struct{}, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.admitLocked(req, held)
}

// enqueue is admit for tests that drive a claim by hand: the claim is
// always returned, never finished by admit (which finishes only requests
// without a Stamp; the test passes its own to finish).
func (b *Backend) enqueue(req backend.AcquireRequest) (*claim, chan struct{}, error) {
	req.Stamp = func(prev backend.Timestamp) (backend.Timestamp, error) { return prev, nil }
	var held backend.Claim
	c, ready, err := b.admit(&req, &held)
	return c, ready, err
}

func TestReleaseClosesOnlyTheNextChannel(t *testing.T) {
	b := New()
	defer b.Close()
	l, _ := b.Grant(t.Context(), time.Hour)
	h, err := b.Acquire(t.Context(), internalRequest("k", l, true))
	if err != nil {
		t.Fatal(err)
	}
	var waiting []*claim
	var chans []chan struct{}
	for _, fair := range []bool{true, true, false, false} {
		c, ready, err := b.enqueue(internalRequest("k", l, fair))
		if err != nil || ready == nil {
			t.Fatalf("enqueue: %v, ready %v; want a waiting request", err, ready)
		}
		waiting = append(waiting, c)
		chans = append(chans, ready)
	}
	woken := func() []int {
		var ids []int
		for i, ch := range chans {
			select {
			case <-ch:
				ids = append(ids, i)
			default:
			}
		}
		return ids
	}
	if err := b.Release(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if got := woken(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("after release, woken requests %v, want only [0]", got)
	}
	// Each later holder is taken out as a cancelled request would be; each
	// removal must wake exactly the next one, non-fair ones last and one
	// at a time.
	for i := range waiting[:len(waiting)-1] {
		_ = b.abandon(waiting[i], context.Canceled)
		if got := woken(); len(got) != i+2 || got[i+1] != i+1 {
			t.Fatalf("after removing holder %d, woken requests %v, want 0..%d", i, got, i+1)
		}
	}
}

func TestNothingLeftBehind(t *testing.T) {
	b := New()
	defer b.Close()
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	l, err := b.Grant(ctx, time.Hour)
	must(err)
	other, err := b.Grant(ctx, time.Hour)
	must(err)

	// Released.
	c, err := b.Acquire(ctx, internalRequest("released", l, true))
	must(err)
	must(b.Release(ctx, c))
	// Held until its lease is revoked.
	_, err = b.Acquire(ctx, internalRequest("revoked", other, true))
	must(err)
	// A fair and a non-fair waiter that give up.
	h, err := b.Acquire(ctx, internalRequest("cancelled", l, true))
	must(err)
	for _, fair := range []bool{true, false} {
		w, _, err := b.enqueue(internalRequest("cancelled", l, fair))
		must(err)
		_ = b.abandon(w, context.Canceled)
	}
	must(b.Release(ctx, h))
	// A refused TryAcquire next to a holder that is revoked.
	_, err = b.Acquire(ctx, internalRequest("refused", l, true))
	must(err)
	r := internalRequest("refused", l, true)
	r.Wait = false
	if _, err := b.Acquire(ctx, r); !errors.Is(err, backend.ErrLocked) {
		t.Fatalf("TryAcquire of a held key: %v, want ErrLocked", err)
	}
	must(b.Revoke(ctx, l.ID))
	must(b.Revoke(ctx, other.ID))

	b.mu.Lock()
	defer b.mu.Unlock()
	// One idle key record may stay parked for reuse; no more, and none
	// with anything in it.
	for name, k := range b.keys {
		if !k.idle() {
			t.Errorf("after every claim ended: key %q still has claims", name)
		}
	}
	if len(b.keys) > 1 || len(b.leases) != 0 {
		t.Errorf("after every claim ended: %d keys and %d leases remain, want at most one parked key and no lease", len(b.keys), len(b.leases))
	}
}

// A claim removed while its request still waits on it (here: its lease is
// revoked) must not be recycled until that request has looked at it, or
// the request would read another acquisition's state.
func TestClaimNotRecycledWhileItsRequestLooks(t *testing.T) {
	b := New()
	defer b.Close()
	ctx := t.Context()
	holderLease, _ := b.Grant(ctx, time.Hour)
	waiterLease, _ := b.Grant(ctx, time.Hour)
	h, err := b.Acquire(ctx, internalRequest("k", holderLease, true))
	if err != nil {
		t.Fatal(err)
	}
	w, ready, err := b.enqueue(internalRequest("k", waiterLease, true))
	if err != nil || ready == nil {
		t.Fatalf("enqueue: %v, ready %v; want a waiting request", err, ready)
	}
	if err := b.Revoke(ctx, waiterLease.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ready:
	default:
		t.Fatal("revoking the waiter's lease did not wake it")
	}
	// Churn: every claim made now must be a fresh or recycled one, never w.
	for i := range 2 * maxFreeClaims {
		c, err := b.Acquire(ctx, internalRequest(fmt.Sprint("other", i), holderLease, true))
		if err != nil {
			t.Fatal(err)
		}
		b.mu.Lock()
		reused := slices.Contains(b.free, w) || b.keys[c.Key].queue.head.c == w
		b.mu.Unlock()
		if reused {
			t.Fatalf("claim of a request still waiting on it was recycled (iteration %d)", i)
		}
		if err := b.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// The request finally looks: it must see its own claim's fate.
	if _, err := b.finish(w, nil); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Fatalf("finish of a revoked waiter: %v, want ErrLeaseExpired", err)
	}
	b.mu.Lock()
	recycled := slices.Contains(b.free, w)
	b.mu.Unlock()
	if !recycled {
		t.Error("claim not recycled once both its request and the store were done with it")
	}
	if err := b.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
}

// Keys taken and freed one after another leave at most one idle record
// behind, however many there were.
func TestIdleKeysDoNotAccumulate(t *testing.T) {
	b := New()
	defer b.Close()
	ctx := t.Context()
	l, _ := b.Grant(ctx, time.Hour)
	for i := range 100 {
		c, err := b.Acquire(ctx, internalRequest(fmt.Sprint("key", i), l, true))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	b.mu.Lock()
	n := len(b.keys)
	b.mu.Unlock()
	if n > 1 {
		t.Errorf("%d key records left after 100 keys were freed, want at most 1", n)
	}
}
