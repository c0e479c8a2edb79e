package etcdbackend_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// Tokens are etcd create revisions: they keep increasing across an etcd
// restart on the same data, and across clients. After the restart the old
// backend recovers by itself: its keep-alive stream and watch stream
// reconnect.
func TestTokensSurviveRestart(t *testing.T) {
	c := etcdtest.Start(t)
	prefix := uniquePrefix(t)
	a, _ := newBackend(t, c, prefix)
	la := grant(t, a, 30*time.Second)
	first := acquire(t, a, request("k", la, "A"))
	if err := a.Release(testCtx(t, waitBound), first); err != nil {
		t.Fatal(err)
	}

	c.StopMember(0)
	ctx := testCtx(t, 2*time.Second)
	if _, err := a.KeepAlive(ctx, la.ID); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("KeepAlive with etcd down: %v, want ErrUnavailable", err)
	}
	c.RestartMemberT(t, 0)

	b, bcli := newBackend(t, c, prefix)
	lb := grant(t, b, 30*time.Second)
	second := acquire(t, b, request("k", lb, "B"))
	if second.Token <= first.Token {
		t.Fatalf("token after restart %d, not above %d before it", second.Token, first.Token)
	}
	if err := b.Release(testCtx(t, waitBound), second); err != nil {
		t.Fatal(err)
	}

	// The old backend: its lease survived the restart (etcd persists
	// leases), it renews over a new stream and sees losses again.
	ttl, err := a.KeepAlive(testCtx(t, waitBound), la.ID)
	if err != nil || ttl < 30*time.Second {
		t.Fatalf("KeepAlive after restart: %v, %v; want >= 30s", ttl, err)
	}
	lost := newLostSignal()
	r := request("k", la, "A again")
	r.OnLost = backend.LossFunc(lost.onLost)
	third := acquire(t, a, r)
	if third.Token <= second.Token {
		t.Fatalf("token %d, not above %d", third.Token, second.Token)
	}
	deleted := time.Now()
	if _, err := bcli.Delete(testCtx(t, waitBound), a.ClaimKey(third)); err != nil {
		t.Fatal(err)
	}
	t.Logf("OnLost after an operator delete, post-restart: %v", lost.await(t, waitBound, deleted))
}

// Separate clients taking turns on one key see strictly increasing tokens.
func TestTokensIncreaseAcrossClients(t *testing.T) {
	prefix := uniquePrefix(t)
	a, _ := newBackend(t, shared, prefix)
	b, _ := newBackend(t, shared, prefix)
	la, lb := grant(t, a, 30*time.Second), grant(t, b, 30*time.Second)
	var last uint64
	for i := range 10 {
		be, l := a, la
		if i%2 == 1 {
			be, l = b, lb
		}
		r := request("turns", l, "client")
		r.Fair = i%3 != 0 // mix fair and non-fair acquisitions
		c := acquire(t, be, r)
		if c.Token <= last {
			t.Fatalf("acquisition %d got token %d, not above %d", i, c.Token, last)
		}
		last = c.Token
		if err := be.Release(testCtx(t, waitBound), c); err != nil {
			t.Fatal(err)
		}
	}
}
