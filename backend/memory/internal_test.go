package memory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// These tests look inside the Backend for properties a caller cannot see:
// which requests were woken, and that nothing is left in its maps.

func internalRequest(key string, l backend.Lease, fair bool) backend.AcquireRequest {
	return backend.AcquireRequest{Key: key, ID: key + fmt.Sprint(time.Now().UnixNano()), Lease: l.ID, Wait: true, Fair: fair}
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
	if len(b.keys) != 0 || len(b.leases) != 0 {
		t.Errorf("after every claim ended: %d keys and %d leases remain, want none", len(b.keys), len(b.leases))
	}
}
