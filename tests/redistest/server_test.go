package redistest

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var srv *Server

func TestMain(m *testing.M) { Main(m, &srv) }

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestServerHasNotificationsAndAOF(t *testing.T) {
	ctx := ctxFor(t)
	c := srv.Client()
	defer c.Close()
	cfg, err := c.ConfigGet(ctx, "*").Result()
	require.NoError(t, err)
	assert.Contains(t, cfg["notify-keyspace-events"], "g")
	assert.Contains(t, cfg["notify-keyspace-events"], "x")
	assert.Contains(t, cfg["notify-keyspace-events"], "K")
	assert.Equal(t, "yes", cfg["appendonly"])
	assert.Equal(t, "always", cfg["appendfsync"])
}

func TestRestartKeepsAcknowledgedWrites(t *testing.T) {
	ctx := ctxFor(t)
	p := Prefix()
	c := srv.Client()
	defer c.Close()
	require.NoError(t, c.Set(ctx, p+"k", "v", 0).Err())
	require.NoError(t, srv.Restart(ctx))
	got, err := c.Get(ctx, p+"k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
}

func TestPauseResume(t *testing.T) {
	ctx := ctxFor(t)
	c := srv.Client()
	defer c.Close()
	require.NoError(t, srv.Pause())
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.Ping(short).Err()
	cancel()
	assert.Error(t, err, "a paused server answered")
	require.NoError(t, srv.Resume())
	require.NoError(t, c.Ping(ctx).Err())
}

func TestKillClientsAndFlush(t *testing.T) {
	ctx := ctxFor(t)
	c := srv.Client()
	defer c.Close()
	require.NoError(t, c.Set(ctx, Prefix()+"k", "v", 0).Err())
	n, err := srv.KillClients(ctx)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, int64(1))
	require.NoError(t, srv.Flush(ctx))
	size, err := c.DBSize(ctx).Result() // the client reconnects
	require.NoError(t, err)
	assert.Zero(t, size)
}

func TestProxyBlackholeAndRestore(t *testing.T) {
	ctx := ctxFor(t)
	p, err := srv.Proxy()
	require.NoError(t, err)
	defer p.Close()
	c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer c.Close()
	require.NoError(t, c.Ping(ctx).Err())

	p.Blackhole()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = c.Ping(short).Err()
	cancel()
	assert.Error(t, err, "a ping through a blackhole was answered")
	p.Restore()
	require.NoError(t, c.Ping(ctx).Err())
}
