package pgbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/postgres"
	"github.com/ash-lock/ashlock/tests/pgtest"
)

// While the server is stopped (SIGSTOP) a holder is poisoned by its own
// deadline; once the server continues, the same client takes the key
// again, past the old lease that expired by the server's clock meanwhile,
// with a higher token.
func TestServerPausedHolderPoisonedThenRecovers(t *testing.T) {
	srv := pgtest.Start(t) // of its own: a paused server stops every test using it
	p := srv.Pool(t, srv.NewDatabase(t), "paused", nil)
	ctx := testCtx(t, time.Minute)
	b, err := postgres.New(ctx, p)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	c, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: 2 * time.Second}, b)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })

	g, err := c.Lock("k").Acquire(ctx)
	require.NoError(t, err)
	before, _ := g.FencingToken()
	require.NoError(t, srv.Pause())
	t.Cleanup(func() { srv.Resume() })
	select {
	case <-g.Done():
	case <-time.After(waitBound):
		t.Fatalf("holder not poisoned within %v of the server stopping", waitBound)
	}
	require.ErrorIs(t, g.Err(), ashlock.ErrLeaseExpired)
	require.NoError(t, srv.Resume())

	g2, err := c.Lock("k").Acquire(ctx)
	require.NoError(t, err)
	after, err := g2.FencingToken()
	require.NoError(t, err)
	require.Greater(t, after, before)
	require.NoError(t, g2.Unlock(ctx))
}
