package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Committed rows survive an immediate shutdown and restart, and a sequence
// carries on past every value it handed out: what tokens rely on.
func TestCrashRestartKeepsCommittedData(t *testing.T) {
	s := Start(t)
	db := s.NewDatabase(t)
	p := s.Pool(t, db, "restart-test", nil)
	ctx := testCtx(t, time.Minute)
	_, err := p.Exec(ctx, `CREATE TABLE t (v int); CREATE SEQUENCE q`)
	require.NoError(t, err)
	var before int64
	require.NoError(t, p.QueryRow(ctx, `INSERT INTO t VALUES (7) RETURNING nextval('q')`).Scan(&before))

	s.RestartT(t)
	p.Reset() // its connections died with the server
	var v int
	var after int64
	require.NoError(t, p.QueryRow(ctx, `SELECT v, nextval('q') FROM t`).Scan(&v, &after))
	require.Equal(t, 7, v)
	require.Greater(t, after, before)
}

// A paused server answers nothing until resumed; a terminated connection
// is gone, others of other applications stay.
func TestPauseAndTerminate(t *testing.T) {
	db := shared.NewDatabase(t)
	victim := shared.Pool(t, db, "victim", func(c *pgxpool.Config) { c.MinConns = 2 })
	bystander := shared.Pool(t, db, "bystander", nil)
	ctx := testCtx(t, time.Minute)
	require.NoError(t, victim.Ping(ctx))
	require.NoError(t, bystander.Ping(ctx))

	require.NoError(t, shared.Pause())
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := bystander.QueryRow(short, `SELECT 1`).Scan(new(int))
	cancel()
	require.Error(t, err, "a paused server answered")
	require.NoError(t, shared.Resume())

	n, err := shared.Terminate(ctx, "victim")
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1)
	var alive int
	require.NoError(t, bystander.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'victim'`).Scan(&alive))
	require.Zero(t, alive)
}

// A held proxy forwards nothing; a statement sent meanwhile is answered
// once the hold ends, on the same connection.
func TestProxyHoldDelivers(t *testing.T) {
	db := shared.NewDatabase(t)
	p := shared.ProxyT(t)
	ctx := testCtx(t, time.Minute)
	c, err := pgx.Connect(ctx, p.DSN(db))
	require.NoError(t, err)
	defer c.Close(context.Background())
	var pid, again int
	require.NoError(t, c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))

	p.Hold(true)
	answered := make(chan error, 1)
	go func() { answered <- c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&again) }()
	select {
	case err := <-answered:
		t.Fatalf("a held proxy let an answer through: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	p.Hold(false)
	select {
	case err := <-answered:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("no answer within 30s of the hold's end")
	}
	require.Equal(t, pid, again, "the statement was answered on another connection")
}

// Drop silences the connections open through the proxy without closing
// them: a statement sent on one ends on its deadline, neither answered nor
// reset, while a connection opened after Drop works.
func TestProxyDropSilences(t *testing.T) {
	db := shared.NewDatabase(t)
	p := shared.ProxyT(t)
	ctx := testCtx(t, time.Minute)
	old, err := pgx.Connect(ctx, p.DSN(db))
	require.NoError(t, err)
	defer old.Close(context.Background())
	require.NoError(t, old.Ping(ctx))

	p.Drop()
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, old.Ping(pctx), context.DeadlineExceeded, "a dropped connection was answered or reset")
	fresh, err := pgx.Connect(ctx, p.DSN(db))
	require.NoError(t, err)
	defer fresh.Close(context.Background())
	require.NoError(t, fresh.Ping(ctx))
}

// Extra settings given to Launch apply, after the defaults, and again
// after a restart.
func TestLaunchSettings(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	s, err := Launch(ctx, "max_connections=123")
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	show := func() string {
		p := s.Pool(t, "postgres", "settings-test", nil)
		defer p.Close()
		var v string
		require.NoError(t, p.QueryRow(ctx, `SHOW max_connections`).Scan(&v))
		return v
	}
	require.Equal(t, "123", show())
	s.RestartT(t)
	require.Equal(t, "123", show())
}
