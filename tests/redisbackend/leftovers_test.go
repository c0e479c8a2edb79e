package redisbackend

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	redisb "github.com/ash-lock/ashlock/backend/redis"
)

// A cancelled wait leaves no key behind, of any kind of request.
func TestCancelledWaitsLeaveNoKey(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	l := grant(t, b, time.Minute)
	holder, err := b.Acquire(ctx, request("left/a", l, "H"))
	require.NoError(t, err)
	var counted []backend.Claim
	for _, o := range []string{"N0", "N1"} {
		c, err := b.Acquire(ctx, counting(request("left/n", l, o)))
		require.NoError(t, err)
		counted = append(counted, c)
	}

	reqs := []backend.AcquireRequest{
		request("left/a", l, "fair"),
		unfair(request("left/a", l, "unfair")),
		shared(request("left/a", l, "shared")),
		multi(request("left/a", l, "multi"), "left/a", "left/b"),
		counting(request("left/n", l, "counted")),
	}
	for _, r := range reqs {
		wctx, cancel := context.WithCancel(ctx)
		p := startAcquireCtx(wctx, b, r)
		if r.Fair {
			awaitWaiting(t, b, r.Key, 1)
		}
		cancel()
		assert.ErrorIs(t, p.awaitErr(t), context.Canceled, r.Owner)
	}
	require.NoError(t, b.Release(ctx, holder))
	for _, c := range counted {
		require.NoError(t, b.Release(ctx, c))
	}
	onlyCounters(t, rc, prefix, l.ID)
}

// A reply lost on its way back (the script ran, the caller never heard)
// leaves nothing either: the claim is found by its ID and removed.
func TestLostReplyLeavesNoKey(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	l := grant(t, b, time.Minute)
	lb := hookedBackend(ctx, t, prefix, dropReplies{})

	warm(t, b, l)
	_, err := lb.Acquire(ctx, request("lost", l, "L"))
	assert.ErrorIs(t, err, backend.ErrUnavailable)
	onlyCounters(t, rc, prefix, l.ID)
}

// A removal of a failed Acquire's claim that fails too is tried again in
// the background: the claim goes long before its lease would end.
func TestFailedCleanupIsRetried(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	l := grant(t, b, time.Hour)
	var fails atomic.Int32
	fails.Store(2)
	lb := hookedBackend(ctx, t, prefix, failCleanups{n: &fails}, dropReplies{})

	warm(t, b, l)
	_, err := lb.Acquire(ctx, request("lost", l, "L"))
	assert.ErrorIs(t, err, backend.ErrUnavailable)
	require.Eventually(t, func() bool {
		return len(keysUnder(t, rc, prefix)) == 3 // the two counters and the lease
	}, 10*time.Second, 10*time.Millisecond, "the claim is still there")
	assert.LessOrEqual(t, fails.Load(), int32(0), "the first removals did not fail")
	onlyCounters(t, rc, prefix, l.ID)
}

// failCleanups fails the cleanup's script runs (see isRelease) while n is
// above zero, without sending them.
type failCleanups struct {
	processOnly
	n *atomic.Int32
}

func (f failCleanups) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if n := cmd.Name(); (n == "evalsha" || n == "eval") && isRelease(cmd) && f.n.Add(-1) >= 0 {
			cmd.SetErr(errDropped)
			return errDropped
		}
		return next(ctx, cmd)
	}
}

// warm takes and releases a lock on b, so that the server has every
// script of an Acquire cached: a first EVALSHA would otherwise be answered
// NOSCRIPT and sent again as EVAL, which the hooks of these tests do not
// expect.
func warm(t *testing.T, b *redisb.Backend, l backend.Lease) {
	t.Helper()
	c, err := b.Acquire(ctxFor(t), request("warm", l, "W"))
	require.NoError(t, err)
	require.NoError(t, b.Release(ctxFor(t), c))
}

// errDropped stands for a reply lost in the network.
var errDropped = errors.New("reply dropped")

// dropReplies runs every script and then loses its reply.
type dropReplies struct{ processOnly }

func (dropReplies) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); (n == "evalsha" || n == "eval") && cmd.Err() == nil && !isRelease(cmd) {
			cmd.SetErr(errDropped)
			return errDropped
		}
		return err
	}
}

// isRelease spares the cleanup's own script run (releaseScript takes an
// empty token), so that the test sees what it leaves.
func isRelease(cmd goredis.Cmder) bool {
	args := cmd.Args()
	return len(args) > 6 && args[6] == ""
}

// Connections killed under a waiter: the subscriber reconnects, the
// waiter reads its queue again, and the handoff still happens; nothing is
// left behind once everyone has released.
func TestKilledConnectionsLeaveNoKey(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	l := grant(t, b, time.Minute)
	holder, err := b.Acquire(ctx, request("killed", l, "H"))
	require.NoError(t, err)
	w := startAcquire(t, b, request("killed", l, "W"))
	awaitWaiting(t, b, "killed", 1)

	n, err := srv.KillClients(ctx)
	require.NoError(t, err)
	require.NotZero(t, n)
	require.NoError(t, b.Release(ctx, holder))
	wc := w.await(t)
	require.NoError(t, b.Release(ctx, wc))
	onlyCounters(t, rc, prefix, l.ID)
}

func unfair(r backend.AcquireRequest) backend.AcquireRequest   { r.Fair = false; return r }
func shared(r backend.AcquireRequest) backend.AcquireRequest   { r.Shared = true; return r }
func counting(r backend.AcquireRequest) backend.AcquireRequest { r.Permits = 2; return r }
func multi(r backend.AcquireRequest, keys ...string) backend.AcquireRequest {
	r.Key, r.Keys = keys[0], keys
	return r
}
