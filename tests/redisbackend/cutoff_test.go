package redisbackend

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// A holder cut off from Redis (its packets dropped, its connections left
// open) is poisoned by its own clock before a rival can take the lock,
// which the server grants only once the holder's lease has expired there.
func TestCutOffHolderPoisonedBeforeRival(t *testing.T) {
	const ttl = 2 * time.Second
	ctx := ctxFor(t)
	prefix := redistest.Prefix()
	p, err := srv.Proxy()
	require.NoError(t, err)
	defer p.Close()

	far := goredis.NewClient(&goredis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer far.Close()
	hb, err := redisb.New(ctx, far, redisb.WithPrefix(prefix))
	require.NoError(t, err)
	defer hb.Close()
	holder, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: ttl}, hb)
	require.NoError(t, err)
	defer holder.Close(ctx)

	rb, _, _ := newBackendPrefix(t, prefix)
	rival, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: ttl}, rb)
	require.NoError(t, err)
	defer rival.Close(ctx)

	g, err := holder.Lock("cut").Acquire(ctx)
	require.NoError(t, err)
	held, err := g.FencingToken()
	require.NoError(t, err)

	cutAt := time.Now()
	p.Blackhole()
	defer p.Restore()
	rg, err := rival.Lock("cut").Acquire(ctx)
	require.NoError(t, err)
	select {
	case <-g.Done():
	default:
		t.Fatal("the rival acquired while the cut-off holder's guard was still valid")
	}
	assert.ErrorIs(t, g.Err(), ashlock.ErrLeaseExpired)
	tok, err := rg.FencingToken()
	require.NoError(t, err)
	assert.Greater(t, tok, held)
	t.Logf("the rival acquired %v after the cut, with a %v TTL", time.Since(cutAt), ttl)
	require.NoError(t, rg.Unlock(ctx))
}
