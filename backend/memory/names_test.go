package memory_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/ash-lock/ashlock/backend"
)

// A request without an ID gets a name from the Backend (NamesClaims): a
// UUID, distinct among the live claims of a key, and a Release must give
// both name and token to remove the claim.
func TestRequestsWithoutIDAreNamed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { testRequestsWithoutIDAreNamed(t) })
}

func testRequestsWithoutIDAreNamed(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	unnamed := func(owner string) backend.AcquireRequest {
		r := request("k", l, owner)
		r.ID = ""
		return r
	}
	h := mustAcquire(t, b, unnamed("H"))
	w := start(t.Context(), b, unnamed("W"))
	synctest.Wait()
	if _, err := uuid.Parse(h.ID); err != nil {
		t.Errorf("holder's claim ID %q is not a UUID: %v", h.ID, err)
	}

	// The right token with another name removes nothing.
	if err := b.Release(t.Context(), backend.Claim{Key: h.Key, ID: h.ID + "x", Lease: h.Lease, Token: h.Token}); err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, b, "k"); info.Token != h.Token {
		t.Fatalf("after a release with the wrong name: holder token %d, want %d", info.Token, h.Token)
	}
	mustRelease(t, b, h)
	wc, err := w.wait(t)
	if err != nil {
		t.Fatal(err)
	}
	if wc.ID == "" || wc.ID == h.ID {
		t.Errorf("waiter's claim ID %q; want a name other than the holder's %q", wc.ID, h.ID)
	}

	// Once a claim is gone its name may be reused; the token tells the two
	// apart, so releasing the old claim leaves the new one.
	mustRelease(t, b, wc)
	again := mustAcquire(t, b, unnamed("A"))
	mustRelease(t, b, wc)
	if info := inspect(t, b, "k"); info.Token != again.Token {
		t.Errorf("a stale release removed a later claim: holder token %d, want %d", info.Token, again.Token)
	}
	mustRelease(t, b, again)
}
