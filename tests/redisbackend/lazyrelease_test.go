package redisbackend

import (
	"context"
	"errors"
	"strconv"
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

// named is request with the claim named by the Backend, as the root
// package always lets it be.
func named(key string, l backend.Lease, owner string) backend.AcquireRequest {
	r := request(key, l, owner)
	r.ID = ""
	return r
}

// queueOf reads key's queue under prefix without a script (a script run
// would first write the releases the server holds back).
func queueOf(t *testing.T, rc *goredis.Client, prefix, key string) []string {
	t.Helper()
	q, err := rc.ZRange(ctxFor(t), "{"+prefix+"}q:"+key, 0, -1).Result()
	require.NoError(t, err)
	return q
}

// releasedThenRestarted acquires key on lease l with a claim b names,
// releases it, restarts the server before anything else is written, and
// checks that the restart brought the released claim back (else the
// release waited for the disk, and the caller's test checks nothing).
func releasedThenRestarted(t *testing.T, b backend.Backend, rc *goredis.Client, prefix, key string, l backend.Lease) backend.Claim {
	t.Helper()
	ctx := ctxFor(t)
	c, err := b.Acquire(ctx, named(key, l, "H"))
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, c))
	require.Empty(t, queueOf(t, rc, prefix, key), "the release did not remove the claim")
	require.NoError(t, srv.Restart(ctx))
	require.Equal(t, []string{c.ID}, queueOf(t, rc, prefix, key),
		"the restart did not bring the released claim back: the release waited for the disk, and this test checks nothing")
	return c
}

// A release that leaves its key free, of a claim the Backend named, is
// answered before it reaches the append-only file: a crash before the
// next write brings the claim back, and its lease's next renewal removes
// it again, so the key is blocked for a renewal interval at most. The
// acquisition itself was written before it was answered, so tokens go on
// growing.
func TestReleaseACrashUndidGoesAtTheNextRenewal(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	l := grant(t, b, time.Minute)
	c := releasedThenRestarted(t, b, rc, prefix, "undone", l)

	_, err := b.KeepAlive(ctx, l.ID)
	require.NoError(t, err, "the renewal took the claim it no longer tracks for a lost one")
	assert.Empty(t, queueOf(t, rc, prefix, "undone"), "the renewal left the released claim holding the key")
	c2, err := b.Acquire(ctx, try(named("undone", grant(t, b, time.Minute), "next")))
	require.NoError(t, err, "the key is not free after the renewal")
	assert.Greater(t, c2.Token, c.Token)
	require.NoError(t, b.Release(ctx, c2))
}

// Any later write of the prefix first writes the releases held back, so a
// crash after it brings none of them back: here an acquisition of another
// key, by another Backend.
func TestAWriteSettlesTheReleasesBeforeIt(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	l := grant(t, b, time.Minute)
	var released []backend.Claim
	for _, k := range []string{"settled/a", "settled/b"} {
		c, err := b.Acquire(ctx, named(k, l, "H"))
		require.NoError(t, err)
		require.NoError(t, b.Release(ctx, c))
		released = append(released, c)
	}
	ob, err := redisb.New(ctx, client(t), redisb.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = ob.Close() })
	other, err := ob.Acquire(ctx, named("settled/other", grant(t, ob, time.Minute), "O"))
	require.NoError(t, err)

	require.NoError(t, srv.Restart(ctx))
	for _, c := range released {
		assert.Empty(t, queueOf(t, rc, prefix, c.Key), "the restart brought back a release made before a later write")
		assert.Zero(t, rc.HLen(ctx, "{"+prefix+"}c:"+c.Key).Val(), "the claim's record came back")
	}
	entries, err := rc.SMembers(ctx, "{"+prefix+"}lc:"+strconv.FormatInt(int64(l.ID), 10)).Result()
	require.NoError(t, err)
	assert.Empty(t, entries, "the lease's index lists released claims again")
	assert.Equal(t, []string{other.ID}, queueOf(t, rc, prefix, "settled/other"), "the later write was lost")
}

// A release with a claim queued behind it hands the key over, so it is
// written before it is answered: a crash right after it brings back
// nothing ahead of the new holder. The new holder's Backend sends nothing
// until the server has restarted (its script runs, which would write the
// releases held back, wait), so the release alone must have been written.
func TestAHandoffIsWrittenBeforeItIsAnswered(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	held, err := b.Acquire(ctx, named("kept", grant(t, b, time.Minute), "H"))
	require.NoError(t, err)
	hold := &holdCommands{open: make(chan struct{})}
	wc := client(t)
	wc.AddHook(hold)
	wb, err := redisb.New(ctx, wc, redisb.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = wb.Close() })
	w := startAcquire(t, wb, named("kept", grant(t, wb, time.Minute), "W"))
	awaitWaiting(t, b, "kept", 1)
	waiter := queueOf(t, rc, prefix, "kept")[1]

	hold.armed.Store(true)
	require.NoError(t, b.Release(ctx, held))
	require.NoError(t, srv.Restart(ctx))
	assert.Equal(t, []string{waiter}, queueOf(t, rc, prefix, "kept"), "the restart undid a release that handed the key over")
	close(hold.open)
	next := w.await(t)
	assert.Equal(t, waiter, next.ID)
	require.NoError(t, wb.Release(ctx, next))
}

// The release of a claim the caller named, which no renewal would remove,
// is written before it is answered.
func TestACallersClaimsReleaseIsWritten(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	c, err := b.Acquire(ctx, request("callers", grant(t, b, time.Minute), "C"))
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, c))
	require.NoError(t, srv.Restart(ctx))
	assert.Empty(t, queueOf(t, rc, prefix, "callers"), "the restart undid the release of a claim the caller named")
}

// holdCommands is a go-redis hook that, once armed, holds every command
// (and pipeline) of its client until open is closed or the command's
// context ends.
type holdCommands struct {
	armed atomic.Bool
	open  chan struct{}
}

func (h *holdCommands) wait(ctx context.Context) error {
	if !h.armed.Load() {
		return nil
	}
	select {
	case <-h.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *holdCommands) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *holdCommands) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *holdCommands) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

// A claim a restart brought back is removed by a renewal that finds more
// claims on the lease than the Backend tracks. An unfair waiter on the
// same lease (as the client's pool gives it) is tracked from the start
// but has no claim in the store until its key is free: it must not hide
// the claim it waits for from the renewal, or it waits for itself.
func TestAnUnfairWaiterDoesNotHideTheClaimACrashBroughtBack(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	l := grant(t, b, time.Minute)
	c := releasedThenRestarted(t, b, rc, prefix, "unfair", l)

	r := named("unfair", l, "W")
	r.Fair = false
	w := startAcquire(t, b, r)
	// The waiter has read the key held by the claim brought back.
	tag := "{" + prefix + "}"
	awaitSubscribed(t, tag+"e:"+strconv.FormatUint(c.Token, 10))
	for range 3 {
		_, err := b.KeepAlive(ctx, l.ID)
		require.NoError(t, err)
	}
	assert.NotContains(t, queueOf(t, rc, prefix, "unfair"), c.ID, "the renewals left the released claim holding the key")
	next := w.await(t)
	require.NoError(t, b.Release(ctx, next))
}

// A server at its memory limit (maxmemory, with nothing to evict) refuses
// what would grow it, but renewals and releases grow nothing and go on, or
// every lease on the server would end. A release held back from the
// append-only file before the limit was reached must not stop them.
func TestAReleaseHeldBackDoesNotStopRenewalsAtTheMemoryLimit(t *testing.T) {
	ctx := ctxFor(t)
	// A server of its own: its memory limit would refuse other tests' writes.
	rc := ownServer(t)
	prefix := redistest.Prefix()
	b, err := redisb.New(ctx, rc, redisb.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	l := grant(t, b, time.Minute)
	held, err := b.Acquire(ctx, named("limit/held", l, "H"))
	require.NoError(t, err)
	c, err := b.Acquire(ctx, named("limit/released", l, "R"))
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, c))
	require.Equal(t, int64(1), rc.Exists(ctx, "{"+prefix+"}pend").Val(), "the release was not held back: this test checks nothing")

	require.NoError(t, rc.ConfigSet(ctx, "maxmemory", "1").Err())
	_, err = b.KeepAlive(ctx, l.ID)
	assert.NoError(t, err, "a renewal refused at the memory limit")
	assert.NoError(t, b.Release(ctx, held), "a release refused at the memory limit")
	require.NoError(t, rc.ConfigSet(ctx, "maxmemory", "0").Err())
}

// A failover keeps a prefix of the writes the primary sent its replicas.
// A release held back is sent only with the next write, so a failover
// that loses that write (here an acquisition on the same lease) loses the
// release with it: the released claim comes back in place of the new
// one. The renewal must still find the new claim lost, though the lease
// has as many claims in the store as this Backend holds. Simulated on one
// server, as TestLostClaimFoundAtRenewal does: the released claim's
// entries put back as they were, the new claim's removed, and every
// client's connections closed, as a failover closes them (Sentinel ends
// the old primary's clients; a restart ends all).
func TestAFailoverLosingAReleaseAndTheNextWriteFindsTheLoss(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	tag := "{" + prefix + "}"
	l := grant(t, b, time.Minute)
	idx := tag + "lc:" + strconv.FormatInt(int64(l.ID), 10)

	x, err := b.Acquire(ctx, named("masked/released", l, "X"))
	require.NoError(t, err)
	rec, err := rc.HGet(ctx, tag+"c:masked/released", x.ID).Result()
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, x))

	lost := make(chan error, 1)
	r := named("masked/held", l, "H")
	r.OnLost = backend.LossFunc(func(err error) { lost <- err })
	h, err := b.Acquire(ctx, r)
	require.NoError(t, err)

	// The replica's state: everything before h's acquisition, which is
	// also the first write to carry x's release.
	require.NoError(t, rc.ZAdd(ctx, tag+"q:masked/released", goredis.Z{Score: float64(x.Token), Member: x.ID}).Err())
	require.NoError(t, rc.HSet(ctx, tag+"c:masked/released", x.ID, rec).Err())
	require.NoError(t, rc.SAdd(ctx, idx, x.ID+"\nmasked/released").Err())
	require.NoError(t, rc.Del(ctx, tag+"q:masked/held", tag+"c:masked/held").Err())
	require.NoError(t, rc.SRem(ctx, idx, h.ID+"\nmasked/held").Err())

	_, err = srv.KillClients(ctx)
	require.NoError(t, err)

	// The renewal that follows the Backend's finding its subscriber's
	// connection gone reads the index whole.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err = b.KeepAlive(ctx, l.ID)
		if errors.Is(err, backend.ErrLeaseExpired) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.ErrorIs(t, err, backend.ErrLeaseExpired, "the renewals took the released claim for the lost one")
	select {
	case err := <-lost:
		assert.ErrorIs(t, err, backend.ErrLeaseExpired)
	case <-time.After(5 * time.Second):
		t.Fatal("OnLost not called: the holder goes on believing it holds a key the store has free")
	}
	other, err := b.Acquire(ctx, try(named("masked/held", grant(t, b, time.Minute), "O")))
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, other))
}
