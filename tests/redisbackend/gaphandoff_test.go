package redisbackend

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/tests/internal/heldconn"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// A release heard on a subscriber connection made after a gap is no
// handoff by itself: the deletion of the waiter's own lease may have been
// published inside the gap and lost with it. Here the waiter's lease is
// deleted while its subscriber is cut off, and the new connection has
// subscribed the holder's channel again but not yet the lease
// notifications when the holder releases: the waiter must read its queue,
// find its claim gone with its lease, and fail, not take the key on the
// deleted lease (which a rival's read then reaps, letting the rival in).
func TestHeardHandoffAfterASubscriberGapIsRead(t *testing.T) {
	ctx := ctxFor(t)
	prefix := redistest.Prefix()
	p, err := srv.Proxy()
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	// Once armed, a connection's writes are held from its PSUBSCRIBE on:
	// its channels are subscribed, its patterns not yet.
	var armed atomic.Bool
	gate := heldconn.New(func(b []byte) bool { return armed.Load() && bytes.Contains(b, []byte("psubscribe")) },
		func(b []byte) bool { return bytes.Contains(b, []byte("subscribe")) })
	t.Cleanup(gate.Finish)
	hb, rc, _ := newBackendPrefix(t, prefix)
	holder, err := hb.Acquire(ctx, request("gap-handoff", grant(t, hb, time.Minute), "H"))
	require.NoError(t, err)

	wc := goredis.NewClient(&goredis.Options{Addr: p.Addr(), Dialer: gate.Dial})
	t.Cleanup(func() { _ = wc.Close() })
	_, wl, w := startHeardWaiter(t, wc, prefix, hb, holder, request("gap-handoff", backend.Lease{}, "W"))

	// The gap: the subscriber goes silent, the lease's deletion is held
	// and then dropped with the connection.
	armed.Store(true)
	p.Blackhole()
	require.NoError(t, rc.Del(ctx, leaseKey(prefix, wl.ID)).Err())
	p.Reset()
	p.Restore()
	// The Backend's own connection after the gap (go-redis makes one of
	// its own first, which the Backend closes unread) confirms the
	// holder's channel; its PSUBSCRIBE waits at the gate.
	select {
	case <-gate.Confirmed:
	case <-time.After(10 * time.Second):
		t.Fatal("no new subscriber connection confirmed the holder's channel")
	}
	require.NoError(t, hb.Release(ctx, holder))
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return within 10s")
	}
	gate.Finish()
	if w.err == nil {
		rival, err := hb.Acquire(ctx, try(request("gap-handoff", grant(t, hb, time.Minute), "R")))
		t.Errorf("the waiter acquired token %d on a lease deleted in the gap; a rival then acquired: token %d, error %v",
			w.claim.Token, rival.Token, err)
		return
	}
	require.ErrorIs(t, w.err, backend.ErrLeaseExpired)
}
