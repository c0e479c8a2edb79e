package redisbackend

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisb "github.com/ash-lock/ashlock/backend/redis"
)

// An exclusive waiter whose claim its Backend named learns of the removal
// of the claim just ahead on its Backend's own channel, subscribed from
// New on: it subscribes to no claim's channel, and the key still passes
// down the queue in order.
func TestANamedExclusiveWaiterSubscribesToNoClaim(t *testing.T) {
	ctx := ctxFor(t)
	hb, c, prefix := newBackend(t)
	holder, ps := queueBehind(t, hb, prefix, "told", 3, named)
	awaitChannels(t, c, prefix, map[string]int64{})

	last := holder.Token
	for i, p := range ps {
		require.NoError(t, hb.Release(ctx, holder))
		holder = p.await(t)
		assert.Greater(t, holder.Token, last, "waiter %d", i)
		last = holder.Token
	}
	require.NoError(t, hb.Release(ctx, holder))
}

// A waiter leaving from the middle of the queue tells the claim behind
// it, which then waits for the claim now ahead of it: here for that
// claim's lease to end, as nothing else tells it (no keyspace
// notifications, no release). Told nothing, it would wait for the end of
// the lease of the claim that left, which lives on.
func TestAWaiterLeavingFromTheMiddleTellsTheClaimBehind(t *testing.T) {
	ctx := ctxFor(t)
	notificationsOff(t)
	quiet := quietLogger()
	hb, _, prefix := newBackend(t, redisb.WithLogger(quiet))
	_, err := hb.Acquire(ctx, named("middle", grant(t, hb, 2*time.Second), "H"))
	require.NoError(t, err)
	pb, err := redisb.New(ctx, client(t), redisb.WithPrefix(prefix), redisb.WithLogger(quiet))
	require.NoError(t, err)
	t.Cleanup(func() { _ = pb.Close() })
	pctx, cancel := context.WithCancel(ctx)
	p := startAcquireCtx(pctx, pb, named("middle", grant(t, pb, time.Hour), "P"))
	awaitWaiting(t, hb, "middle", 1)
	wb, err := redisb.New(ctx, client(t), redisb.WithPrefix(prefix), redisb.WithLogger(quiet))
	require.NoError(t, err)
	t.Cleanup(func() { _ = wb.Close() })
	w := startAcquire(t, wb, named("middle", grant(t, wb, time.Hour), "W"))
	awaitWaiting(t, hb, "middle", 2)

	cancel()
	require.ErrorIs(t, p.awaitErr(t), context.Canceled)
	c := w.await(t) // once the holder's lease of 2 s has ended
	require.NoError(t, wb.Release(ctx, c))
}
