package redisbackend

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// A release wakes only the next waiter: each handoff costs the same few
// requests however many wait, and nobody polls while they wait.
func TestHandoffCostIsConstant(t *testing.T) {
	for _, waiters := range []int{4, 32} {
		t.Run(fmt.Sprint(waiters, " waiters"), func(t *testing.T) {
			ctx := ctxFor(t)
			var calls atomic.Int64
			rc := srv.Client()
			defer rc.Close()
			rc.AddHook(countCalls{&calls})
			b, err := redisb.New(ctx, rc, redisb.WithPrefix(redistest.Prefix()))
			require.NoError(t, err)
			defer b.Close()
			l := grant(t, b, time.Minute)

			// Load every script once (go-redis sends EVAL after a NOSCRIPT).
			warm, err := b.Acquire(ctx, request("warm-up", l, "H"))
			require.NoError(t, err)
			next := startAcquire(t, b, request("warm-up", l, "W"))
			awaitWaiting(t, b, "warm-up", 1)
			require.NoError(t, b.Release(ctx, warm))
			require.NoError(t, b.Release(ctx, next.await(t)))

			holder, err := b.Acquire(ctx, request("handoff", l, "H"))
			require.NoError(t, err)
			ps := make([]*pending, waiters)
			for i := range ps {
				ps[i] = startAcquire(t, b, request("handoff", l, fmt.Sprint("W", i)))
				awaitWaiting(t, b, "handoff", i+1)
			}

			idle := calls.Load()
			time.Sleep(200 * time.Millisecond) // a window in which pollers would show
			assert.Equal(t, idle, calls.Load(), "requests while everyone waits")

			before := calls.Load()
			for _, p := range ps {
				require.NoError(t, b.Release(ctx, holder))
				holder = p.await(t)
			}
			perHandoff := float64(calls.Load()-before) / float64(waiters)
			require.NoError(t, b.Release(ctx, holder))
			t.Logf("%.2f requests per handoff with %d waiters", perHandoff, waiters)
			// Release, the woken waiter's read and its admission: 3. The
			// bound leaves room for a read repeated now and then because
			// an event crossed it, not for one per waiter.
			assert.LessOrEqual(t, perHandoff, 3.5)
		})
	}
}

// countCalls counts the commands a client sends.
type countCalls struct{ n *atomic.Int64 }

func (c countCalls) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c countCalls) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
func (c countCalls) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

var _ backend.Backend = (*redisb.Backend)(nil)
