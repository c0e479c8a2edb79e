package pgbackend_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
	"github.com/ash-lock/ashlock/tests/pgtest"
)

// Tokens keep growing across an immediate shutdown (crash recovery on the
// next start), for a key used before and for one new after: they are
// committed rows, not in-memory counters.
func TestTokensSurviveCrashRestart(t *testing.T) {
	srv := pgtest.Start(t) // a server of its own: the crash would hit every test
	db := srv.NewDatabase(t)
	p := srv.Pool(t, db, "restart", nil)
	ctx := testCtx(t, time.Minute)
	b, err := postgres.New(ctx, p)
	require.NoError(t, err)
	defer b.Close()

	cycle := func(key string) uint64 {
		t.Helper()
		l, err := b.Grant(ctx, time.Minute)
		require.NoError(t, err)
		c, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, ID: "x", Lease: l.ID, Owner: "o", Wait: true, Fair: true})
		require.NoError(t, err)
		require.NoError(t, b.Release(ctx, c))
		return c.Token
	}
	var last uint64
	for range 5 {
		last = cycle("k")
	}
	other := cycle("other")

	srv.RestartT(t)
	p.Reset() // its connections died with the server

	next := cycle("k")
	require.Greater(t, next, last, "a token was reused after the restart")
	require.Greater(t, cycle("other"), other)
	// A key first used after the restart never gets a token below those
	// handed out before it.
	require.Greater(t, cycle("new"), uint64(0))
}
