package redisbackend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	_ "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// The root client works on the Redis backend: a lock, a waiter handed the
// key, Inspect, and Close.
func TestClientSmoke(t *testing.T) {
	ctx := ctxFor(t)
	b, _, _ := newBackend(t)
	c, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: 5 * time.Second, Stamps: true}, b)
	require.NoError(t, err)
	defer c.Close(ctx)

	g, err := c.Lock("orders/42").WithOwner("first").Acquire(ctx)
	require.NoError(t, err)
	tok, err := g.FencingToken()
	require.NoError(t, err)

	_, err = c.Lock("orders/42").TryAcquire(ctx)
	assert.ErrorIs(t, err, ashlock.ErrLocked)

	next := make(chan *ashlock.Guard, 1)
	go func() {
		g2, err := c.Lock("orders/42").WithOwner("second").Acquire(ctx)
		assert.NoError(t, err)
		next <- g2
	}()
	awaitWaiting(t, b, "orders/42", 1)
	info, err := c.Inspect(ctx, "orders/42")
	require.NoError(t, err)
	assert.Equal(t, "first", info.Owner)
	assert.Equal(t, tok, info.Token)

	require.NoError(t, g.Unlock(ctx))
	select {
	case g2 := <-next:
		tok2, err := g2.FencingToken()
		require.NoError(t, err)
		assert.Greater(t, tok2, tok)
		st1, _ := g.Stamp()
		st2, ok := g2.Stamp()
		assert.True(t, ok)
		assert.True(t, st1.Less(st2), "stamps %v then %v", st1, st2)
		require.NoError(t, g2.Unlock(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not handed the key")
	}
}

// Connect opens redis:// seeds once backend/redis is imported, with the
// prefix from ashlock_prefix.
func TestConnectBySeed(t *testing.T) {
	ctx := ctxFor(t)
	prefix := redistest.Prefix()
	c, err := ashlock.Connect(ctx, ashlock.LockConfig{ClusterSeed: srv.URL() + "?ashlock_prefix=" + prefix})
	require.NoError(t, err)
	g, err := c.Lock("seeded").Acquire(ctx)
	require.NoError(t, err)
	rc := client(t)
	n, err := rc.Exists(ctx, "{"+prefix+"}q:seeded").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the lock is not under the seed's prefix")
	require.NoError(t, g.Unlock(ctx))
	require.NoError(t, c.Close(ctx))

	_, err = ashlock.Connect(ctx, ashlock.LockConfig{ClusterSeed: srv.URL() + "?ashlock_prefix=a{b"})
	assert.ErrorIs(t, err, ashlock.ErrInvalidConfig)
}

// An operator's DEL of a lease poisons the guards on it promptly, through
// the keyspace notification, long before the next renewal.
func TestLeaseDeletePoisonsGuard(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	c, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: 30 * time.Second}, b)
	require.NoError(t, err)
	defer c.Close(ctx)
	g, err := c.Lock("deleted").Acquire(ctx)
	require.NoError(t, err)

	leases, err := rc.Keys(ctx, globEscape("{"+prefix+"}lease:")+"*").Result()
	require.NoError(t, err)
	require.Len(t, leases, 1)
	at := time.Now()
	require.NoError(t, rc.Del(ctx, leases[0]).Err())
	select {
	case <-g.Done():
		t.Logf("poisoned %v after the DEL", time.Since(at))
	case <-time.After(time.Second):
		t.Fatal("a guard whose lease was deleted is still valid after 1s")
	}
	assert.ErrorIs(t, g.Err(), ashlock.ErrLeaseExpired)

	// The key is free again at once: the claim was reaped, not left to
	// block the next holder.
	g2, err := c.Lock("deleted").TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, g2.Unlock(ctx))
	assert.ErrorIs(t, g.Unlock(ctx), ashlock.ErrLeaseExpired, "Unlock of a poisoned guard tells the section was not protected")
}

// Tokens keep growing across a restart of a server that writes its AOF
// with appendfsync always: the counter survives, and so does the lock.
func TestTokensGrowAcrossRestart(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	l := grant(t, b, time.Minute)
	held, err := b.Acquire(ctx, request("restart/held", l, "H"))
	require.NoError(t, err)
	var last uint64
	for range 5 {
		c, err := b.Acquire(ctx, request("restart/cycled", l, "C"))
		require.NoError(t, err)
		require.NoError(t, b.Release(ctx, c))
		last = c.Token
	}

	require.NoError(t, srv.Restart(ctx))

	saved, err := rc.Get(ctx, "{"+prefix+"}token").Uint64()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, saved, last, "the token counter lost acknowledged writes")
	info, err := b.Inspect(ctx, "restart/held")
	require.NoError(t, err)
	assert.Equal(t, held.Token, info.Token, "the holder's claim did not survive the restart")
	_, err = b.KeepAlive(ctx, l.ID)
	require.NoError(t, err, "the lease did not survive the restart")

	// The Backend's subscription comes back by itself; new tokens go on
	// from where the counter was.
	c, err := b.Acquire(ctx, request("restart/cycled", l, "after"))
	require.NoError(t, err)
	assert.Greater(t, c.Token, last)
	require.NoError(t, b.Release(ctx, c))

	w := startAcquire(t, b, request("restart/held", l, "waiter"))
	awaitWaiting(t, b, "restart/held", 1)
	require.NoError(t, b.Release(ctx, held))
	wc := w.await(t)
	assert.Greater(t, wc.Token, held.Token)
	require.NoError(t, b.Release(ctx, wc))
}
