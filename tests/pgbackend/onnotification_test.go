package pgbackend_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// A pool whose connection config has a notification handler of the
// application's own (pgx then hands notifications to it rather than to
// WaitForNotification) still gives the Backend a working listener: the
// listener's connection is its own, and a waiter is woken by the release.
func TestPoolWithNotificationHandler(t *testing.T) {
	schema := uniqueSchema(t)
	var theirs atomic.Int64
	p := shared.Pool(t, database(t), "onnotify", func(cfg *pgxpool.Config) {
		cfg.ConnConfig.OnNotification = func(*pgconn.PgConn, *pgconn.Notification) { theirs.Add(1) }
	})
	ctx := testCtx(t, 2*waitBound)
	b, err := postgres.New(ctx, p, postgres.WithSchema(schema))
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	l, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)
	h, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "h", Lease: l.ID, Wait: true, Fair: true})
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, waitBound)
		defer cancel()
		c, err := b.Acquire(wctx, backend.AcquireRequest{Key: "k", ID: "w", Lease: l.ID, Owner: "w", Wait: true, Fair: true})
		if err == nil {
			err = b.Release(ctx, c)
		}
		got <- err
	}()
	awaitWaiter(t, b, "k", "w")
	require.NoError(t, b.Release(ctx, h))
	require.NoError(t, <-got, "the waiter was not admitted after the release")
}
