package pgbackend_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// An enqueue that commits but whose reply is lost leaves no row: the
// failed Acquire deletes its claim by name once the server can be reached
// again, though it never learnt the claim's token.
func TestLostEnqueueReplyLeavesNoRow(t *testing.T) {
	schema := uniqueSchema(t)
	direct, admin := newBackend(t, schema)
	proxy := shared.ProxyT(t)
	cfg, err := pgxpool.ParseConfig(proxy.DSN(database(t)))
	require.NoError(t, err)
	ctx := testCtx(t, 3*waitBound)
	ap, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(ap.Close)
	ab, err := postgres.New(ctx, ap, postgres.WithSchema(schema))
	require.NoError(t, err)
	t.Cleanup(func() { ab.Close() })

	l, tx := holdKeyRow(t, ctx, direct, admin, schema)
	al, err := ab.Grant(ctx, time.Minute)
	require.NoError(t, err)

	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	failed := make(chan error, 1)
	go func() {
		_, err := ab.Acquire(actx, backend.AcquireRequest{Key: "k", ID: "lost", Lease: al.ID, Owner: "lost", Wait: true, Fair: true})
		failed <- err
	}()
	awaitBlockedOnLock(t, admin)
	proxy.Blackhole(true)
	require.NoError(t, tx.Commit(ctx)) // the enqueue commits; its reply is dropped
	require.ErrorIs(t, <-failed, context.DeadlineExceeded)
	require.Equal(t, 1, rows(t, schema, "k"), "the enqueue did not commit: the test shows nothing")

	proxy.Blackhole(false)
	proxy.Sever() // the connections that lost bytes are reset
	deadline := time.Now().Add(waitBound)
	for rows(t, schema, "k") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the claim of the failed Acquire is still there %v after the server came back", waitBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// And the key is free for the next.
	c, err := direct.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "next", Lease: l.ID, Wait: false, Fair: true})
	require.NoError(t, err)
	require.NoError(t, direct.Release(ctx, c))
}

// holdKeyRow makes the row of key "k" (by using the key once, on a lease
// of direct's that it returns) and locks it in a transaction of admin's,
// rolled back at the test's end unless committed: an enqueue of "k" then
// waits inside the server until the transaction ends.
func holdKeyRow(t *testing.T, ctx context.Context, direct *postgres.Backend, admin *pgxpool.Pool, schema string) (backend.Lease, pgx.Tx) {
	t.Helper()
	l, err := direct.Grant(ctx, time.Minute)
	require.NoError(t, err)
	c, err := direct.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "first", Lease: l.ID, Wait: true, Fair: true})
	require.NoError(t, err)
	require.NoError(t, direct.Release(ctx, c))
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, fmt.Sprintf(`SELECT 1 FROM %s.keys WHERE key = 'k' FOR UPDATE`, pgx.Identifier{schema}.Sanitize()))
	require.NoError(t, err)
	return l, tx
}

// awaitBlockedOnLock polls until some statement waits for a lock.
func awaitBlockedOnLock(t *testing.T, p *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		var n int
		require.NoError(t, p.QueryRow(testCtx(t, waitBound), `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&n))
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statement waits for a lock after %v", waitBound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An enqueue still waiting inside the server (here for the key's row)
// when its Acquire gives up, and that the client cannot cancel (the cancel
// request is lost on the way, as through a proxy that drops it), commits
// after the failed Acquire's cleanup has run: the cleanup must wait for it
// rather than delete nothing and be done, or the claim stays queued, bound
// to a lease that lives on, and blocks the key.
func TestCleanupOutwaitsStalledEnqueue(t *testing.T) {
	schema := uniqueSchema(t)
	direct, admin := newBackend(t, schema)
	const app = "stalled-enqueue"
	ap := shared.Pool(t, database(t), app, func(cfg *pgxpool.Config) {
		dial := cfg.ConnConfig.DialFunc
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return cancelEater{c}, nil
		}
	})
	ctx := testCtx(t, 4*waitBound)
	ab, err := postgres.New(ctx, ap, postgres.WithSchema(schema))
	require.NoError(t, err)
	t.Cleanup(func() { ab.Close() })
	activity := func(query string, args ...any) int {
		var n int
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE `+query, args...).Scan(&n))
		return n
	}
	await := func(what, query string, args ...any) {
		t.Helper()
		deadline := time.Now().Add(waitBound)
		for activity(query, args...) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, waitBound)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	l, tx := holdKeyRow(t, ctx, direct, admin, schema)
	al, err := ab.Grant(ctx, time.Minute)
	require.NoError(t, err)

	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = ab.Acquire(actx, backend.AcquireRequest{Key: "k", ID: "stalled", Lease: al.ID, Owner: "stalled", Wait: true, Fair: true})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var stalled int
	require.NoError(t, admin.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
		WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&stalled))

	// The cleanup has run, or waits for a lock, while the enqueue still
	// waits for the key's row.
	await("the cleanup reaches the server", `application_name = $1 AND pid <> $2
		AND ((state = 'idle' AND query LIKE '%.claims WHERE key = ANY($1) AND name = $2') OR wait_event_type = 'Lock')`,
		app, stalled)
	require.NoError(t, tx.Commit(ctx)) // the stalled enqueue goes on
	await("the stalled enqueue ends", `NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active')`, stalled)

	deadline := time.Now().Add(waitBound)
	for rows(t, schema, "k") != 0 {
		if time.Now().After(deadline) {
			info, err := direct.Inspect(ctx, "k")
			require.NoError(t, err)
			t.Fatalf("the claim of the failed Acquire is still queued %v later: %+v", waitBound, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err := direct.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "next", Lease: l.ID, Wait: false, Fair: true})
	require.NoError(t, err)
	require.NoError(t, direct.Release(ctx, c))
}

// cancelEater is a connection that loses PostgreSQL cancel requests.
type cancelEater struct{ net.Conn }

func (c cancelEater) Write(b []byte) (int, error) {
	if len(b) >= 8 && binary.BigEndian.Uint32(b[4:8]) == 80877102 {
		c.Close()
		return len(b), nil
	}
	return c.Conn.Write(b)
}
