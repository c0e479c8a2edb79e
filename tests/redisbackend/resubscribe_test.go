package redisbackend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/tests/redistest"
)

// A release whose event never reaches a waiter's backend (its connections
// silent, then reset) still hands the key over: once the subscription is
// back, every waiter reads its queue again.
func TestWaiterReadsAgainAfterResubscribing(t *testing.T) {
	ctx := ctxFor(t)
	prefix := redistest.Prefix()
	p, err := srv.Proxy()
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	wb := backendVia(ctx, t, p.Addr(), prefix)
	hb, _, _ := newBackendPrefix(t, prefix)

	l := grant(t, hb, time.Minute)
	holder, err := hb.Acquire(ctx, request("resub", l, "H"))
	require.NoError(t, err)
	w := startAcquire(t, wb, request("resub", l, "W"))
	awaitWaiting(t, hb, "resub", 1)

	p.Blackhole()
	require.NoError(t, hb.Release(ctx, holder)) // its event is held by the blackhole...
	p.Reset()                                   // ...and dropped
	p.Restore()
	wc := w.await(t)
	require.NoError(t, wb.Release(ctx, wc))
}
