package redisbackend

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	redisb "github.com/ash-lock/ashlock/backend/redis"
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
	defer p.Close()
	far := goredis.NewClient(&goredis.Options{Addr: p.Addr()})
	defer far.Close()
	wb, err := redisb.New(ctx, far, redisb.WithPrefix(prefix))
	require.NoError(t, err)
	defer wb.Close()
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
