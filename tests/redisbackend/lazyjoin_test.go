package redisbackend

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	redisb "github.com/ash-lock/ashlock/backend/redis"
)

// awaitQueued waits until key's queue under prefix has n claims, reading
// it without a script (a script run would first write the joins the
// server holds back).
func awaitQueued(t *testing.T, rc *goredis.Client, prefix, key string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q := queueOf(t, rc, prefix, key)
		if len(q) == n {
			return q
		}
		require.True(t, time.Now().Before(deadline), "%q has %d claims queued, want %d", key, len(q), n)
		time.Sleep(5 * time.Millisecond)
	}
}

// heldBack is a holder of a key and a waiter queued behind it whose join
// the server has not written to the disk yet.
type heldBack struct {
	b      backend.Backend // the holder's Backend
	held   backend.Claim   // the holder's claim, on b
	wb     *redisb.Backend // the waiter's Backend
	w      *pending        // the waiter's Acquire
	waiter string          // its claim's ID
	token  uint64          // and token
}

// heldBackJoin acquires key on b, queues a waiter on a Backend of its own
// behind it and returns them once the waiter's claim is in the queue,
// checking that the server holds its join back from the disk (else the
// caller's test checks nothing).
func heldBackJoin(t *testing.T, b backend.Backend, rc *goredis.Client, prefix, key string) heldBack {
	t.Helper()
	ctx := ctxFor(t)
	held, err := b.Acquire(ctx, named(key, grant(t, b, time.Minute), "H"))
	require.NoError(t, err)
	wb, err := redisb.New(ctx, client(t), redisb.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = wb.Close() })
	w := startAcquire(t, wb, named(key, grant(t, wb, time.Minute), "W"))
	waiter := awaitQueued(t, rc, prefix, key, 2)[1]
	pend, err := rc.SMembers(ctx, "{"+prefix+"}pend").Result()
	require.NoError(t, err)
	require.Contains(t, pend, "j"+waiter+"\n"+key, "the waiter's join was written before it was answered: this test checks nothing")
	token, err := rc.ZScore(ctx, "{"+prefix+"}q:"+key, waiter).Result()
	require.NoError(t, err)
	return heldBack{b: b, held: held, wb: wb, w: w, waiter: waiter, token: uint64(token)}
}

// handOverAndRestart releases the holder's claim, which hands the key to
// the waiter, then restarts the server: what the file held then is all
// that is left.
func (h heldBack) handOverAndRestart(t *testing.T) {
	t.Helper()
	ctx := ctxFor(t)
	require.NoError(t, h.b.Release(ctx, h.held))
	require.NoError(t, srv.Restart(ctx))
}

// A claim that queues behind a holder is answered before its join reaches
// the append-only file; the release that hands it the key writes the join
// first, so a crash right after that release leaves the new holder's
// claim in place.
func TestTheJoinIsWrittenBeforeTheReleaseThatHandsItTheKey(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	h := heldBackJoin(t, b, rc, prefix, "joined")

	h.handOverAndRestart(t)
	assert.Equal(t, []string{h.waiter}, queueOf(t, rc, prefix, "joined"), "the restart lost the join of the claim the release handed the key to")
	next := h.w.await(t)
	assert.Equal(t, h.waiter, next.ID)
	assert.Equal(t, h.token, next.Token)
	require.NoError(t, h.wb.Release(ctx, next))
}

// The run that writes a held-back join writes the token counter with it,
// so that after a restart the counter is not below a token the file
// holds (the next token is never below the server's clock either, but
// that holds only while the clock does not go back).
func TestASettledJoinWritesTheTokenCounter(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	h := heldBackJoin(t, b, rc, prefix, "counter")

	h.handOverAndRestart(t)
	counter, err := rc.Get(ctx, "{"+prefix+"}token").Uint64()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, counter, h.token, "the counter in the file is below the token of the join it holds")
	next := h.w.await(t)
	require.NoError(t, h.wb.Release(ctx, next))
}

// A crash before anything wrote a waiter's join loses its claim; the
// waiter, finding it gone with its lease alive, joins again and takes the
// key in its turn instead of failing.
func TestAJoinACrashLostJoinsAgain(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	h := heldBackJoin(t, b, rc, prefix, "rejoin")

	require.NoError(t, srv.Restart(ctx))
	require.NoError(t, b.Release(ctx, h.held))
	next := h.w.await(t)
	assert.Greater(t, next.Token, h.token, "the waiter holds with the token of the join the restart should have lost")
	require.NoError(t, h.wb.Release(ctx, next))
	assert.Empty(t, queueOf(t, rc, prefix, "rejoin"))
}

// A claim the rule admits behind others (a reader behind a reader, a
// counted claim behind fewer claims than its permits) may hold from its
// join's own read: that join is written before it is answered.
func TestAJoinThatHoldsAtOnceIsWritten(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind func(*backend.AcquireRequest)
	}{
		{"shared", func(r *backend.AcquireRequest) { r.Shared = true }},
		{"counted", func(r *backend.AcquireRequest) { r.Permits = 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			b, rc, prefix := newBackend(t)
			var held []backend.Claim
			for _, owner := range []string{"first", "second"} {
				r := named("together", grant(t, b, time.Minute), owner)
				tc.kind(&r)
				c, err := b.Acquire(ctx, r)
				require.NoError(t, err)
				held = append(held, c)
			}
			require.NoError(t, srv.Restart(ctx))
			assert.Equal(t, []string{held[0].ID, held[1].ID}, queueOf(t, rc, prefix, "together"),
				"the restart lost a join that held its key at once")
			for _, c := range held {
				require.NoError(t, b.Release(ctx, c))
			}
		})
	}
}

// An operator who deletes the token counter while a join is held back
// breaks no script run: the settling of the join writes the counter only
// if there is one (and the next token, never below the server's clock,
// sets it again).
func TestAJoinHeldBackSurvivesTheCounterDeleted(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	h := heldBackJoin(t, b, rc, prefix, "nocounter")
	require.NoError(t, rc.Del(ctx, "{"+prefix+"}token").Err())

	require.NoError(t, b.Release(ctx, h.held), "the release's settling of the join failed")
	next := h.w.await(t)
	assert.Equal(t, h.waiter, next.ID)
	require.NoError(t, h.wb.Release(ctx, next))
}

// A join held back from the disk writes nothing there, so it does not
// write the joins held back before it either (that would make its reply
// wait for an fsync): they stay noted until a run that writes.
func TestAJoinHeldBackLeavesEarlierJoinsHeldBack(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	// The second waiter's lease first: granting one is a write.
	sb, err := redisb.New(ctx, client(t), redisb.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close() })
	sl := grant(t, sb, time.Minute)
	h := heldBackJoin(t, b, rc, prefix, "second")

	s := startAcquire(t, sb, named("second", sl, "S"))
	second := awaitQueued(t, rc, prefix, "second", 3)[2]
	pend, err := rc.SMembers(ctx, "{"+prefix+"}pend").Result()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"j" + h.waiter + "\nsecond", "j" + second + "\nsecond"}, pend,
		"the second join wrote the first to the disk")

	h.handOverAndRestart(t)
	assert.Equal(t, []string{h.waiter, second}, queueOf(t, rc, prefix, "second"), "the release that handed over did not write both joins")
	next := h.w.await(t)
	require.NoError(t, h.wb.Release(ctx, next))
	last := s.await(t)
	require.NoError(t, sb.Release(ctx, last))
}
