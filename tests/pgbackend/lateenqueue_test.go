package pgbackend_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
	"github.com/ash-lock/ashlock/tests/internal/heldconn"
)

// An enqueue held up in the network until after its Acquire has given up
// and deleted its claim by name (the delete, on another connection, got
// through first, as after a partition that heals for one connection
// before another) inserts the claim after all. Bound to a lease that
// lives on, it would hold the key and nobody would ever release it: the
// lease's next renewal finds a claim the Backend named and no longer has
// under way, and deletes it.
func TestAClaimLeftBehindGoesAtTheNextRenewal(t *testing.T) {
	schema := uniqueSchema(t)
	direct, admin := newBackend(t, schema)
	const owner = "late-enqueue-owner"
	late := heldconn.New(func(b []byte) bool { return bytes.Contains(b, []byte(owner)) }, nil)
	t.Cleanup(late.Finish)
	ap := shared.Pool(t, database(t), "late-enqueue", func(cfg *pgxpool.Config) {
		dial := cfg.ConnConfig.DialFunc
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return late.Wrap(c), nil
		}
	})
	ctx := testCtx(t, 4*waitBound)
	ab, err := postgres.New(ctx, ap, postgres.WithSchema(schema))
	require.NoError(t, err)
	t.Cleanup(func() { ab.Close() })
	l, err := ab.Grant(ctx, time.Minute)
	require.NoError(t, err)

	// The Backend names the claim, as it does for the root package.
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = ab.Acquire(actx, backend.AcquireRequest{Key: "k", Lease: l.ID, Owner: owner, Wait: true, Fair: true})
	require.ErrorIs(t, err, context.DeadlineExceeded, "the enqueue's reply never came")
	// The failed Acquire's cleanup finds nothing yet (it goes on in the
	// background until it has run once); then the enqueue arrives.
	cleaned := time.Now().Add(waitBound)
	for {
		var n int
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'late-enqueue'
			AND state = 'idle' AND query LIKE '%.claims WHERE key = ANY($1) AND name = $2'`).Scan(&n))
		if n > 0 {
			break
		}
		require.True(t, time.Now().Before(cleaned), "the failed Acquire's cleanup did not run")
		time.Sleep(5 * time.Millisecond)
	}
	late.Finish()
	deadline := time.Now().Add(waitBound)
	for rows(t, schema, "k") == 0 {
		require.True(t, time.Now().Before(deadline), "the held enqueue never inserted its claim: the test shows nothing")
		time.Sleep(5 * time.Millisecond)
	}

	_, err = ab.KeepAlive(ctx, l.ID)
	require.NoError(t, err)
	assert.Zero(t, rows(t, schema, "k"), "the renewal left the claim behind")
	dl, err := direct.Grant(ctx, time.Minute)
	require.NoError(t, err)
	c, err := direct.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "next", Lease: dl.ID, Wait: false, Fair: true})
	require.NoError(t, err, "the key is not free after the renewal")
	require.NoError(t, direct.Release(ctx, c))
}

// Renewals racing acquisitions and releases of claims the Backend names
// never delete one under way: each is recorded before its enqueue is sent
// and until its rows are gone.
func TestRenewalsRacingAcquisitionsDeleteNothing(t *testing.T) {
	schema := uniqueSchema(t)
	b, admin := newBackend(t, schema)
	ctx := testCtx(t, 4*waitBound)
	l, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)
	count := fmt.Sprintf(`SELECT count(*) FROM %s.claims WHERE key = $1`, pgx.Identifier{schema}.Sanitize())
	stop := make(chan struct{})
	done := make(chan error, 3)
	for w := range 3 {
		go func() {
			key := "race" + strconv.Itoa(w)
			for i := 0; ; i++ {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				req := backend.AcquireRequest{Key: key, Lease: l.ID, Wait: true, Fair: true}
				if i%2 == 1 {
					req.Keys = []string{key, key + "/x"}
				}
				c, err := b.Acquire(ctx, req)
				var n int
				if err == nil {
					err = admin.QueryRow(ctx, count, key).Scan(&n)
				}
				if err == nil && n != 1 {
					err = fmt.Errorf("%d rows of %q after its Acquire returned", n, key)
				}
				if err == nil {
					err = b.Release(ctx, c)
				}
				if err != nil {
					done <- err
					return
				}
			}
		}()
	}
	renewals := 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); renewals++ {
		_, err := b.KeepAlive(ctx, l.ID)
		require.NoError(t, err, "after %d renewals", renewals)
	}
	close(stop)
	for range 3 {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(waitBound):
			t.Fatal("a worker did not stop")
		}
	}
	t.Logf("%d renewals", renewals)
}

// A waiter that takes no place in the queue (Wait, not Fair) is under way
// from its start but has no rows while it waits: it must not hide from
// the renewal of its lease (the client's pool gives every lock of one TTL
// the same lease) a claim left behind there, least of all the one it
// waits for, or it waits for it until its context ends.
func TestAnUnfairWaiterDoesNotHideAClaimLeftBehind(t *testing.T) {
	schema := uniqueSchema(t)
	_, admin := newBackend(t, schema)
	// One connection: when it last ran a statement tells when the Backend
	// last sent one.
	p := shared.Pool(t, database(t), "unfair-"+schema, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	ctx := testCtx(t, 4*waitBound)
	b, err := postgres.New(ctx, p, postgres.WithSchema(schema))
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	l, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)

	// A claim the Backend named, its rows put back after its release as a
	// late enqueue would have left them.
	c, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", Lease: l.ID, Owner: "left", Wait: true, Fair: true})
	require.NoError(t, err)
	s := pgx.Identifier{schema}.Sanitize()
	_, err = admin.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s.saved (LIKE %[1]s.claims)`, s))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s.saved SELECT * FROM %[1]s.claims WHERE name = $1`, s), c.ID)
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, c))
	_, err = admin.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s.claims SELECT * FROM %[1]s.saved`, s))
	require.NoError(t, err)
	require.Equal(t, 1, rows(t, schema, "k"))

	var pid int
	require.NoError(t, p.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	last := func() (time.Time, string) {
		var at time.Time
		var state string
		require.NoError(t, admin.QueryRow(ctx, `SELECT query_start, state FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&at, &state))
		return at, state
	}
	before, _ := last()
	w := make(chan error, 1)
	go func() {
		c, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", Lease: l.ID, Owner: "w", Wait: true, Fair: false})
		if err == nil {
			err = b.Release(ctx, c)
		}
		w <- err
	}()
	// The waiter has read the key, held by the claim left behind, and waits.
	deadline := time.Now().Add(waitBound)
	for at, state := last(); !at.After(before) || state != "idle"; at, state = last() {
		require.True(t, time.Now().Before(deadline), "the waiter did not read the key")
		time.Sleep(5 * time.Millisecond)
	}

	// Renewals until the waiter holds: the statement seen may be the last
	// before the waiter has begun to wait.
	deadline = time.Now().Add(waitBound)
	for done := false; !done; {
		_, err = b.KeepAlive(ctx, l.ID)
		require.NoError(t, err)
		select {
		case err := <-w:
			require.NoError(t, err)
			done = true
		case <-time.After(20 * time.Millisecond):
			require.True(t, time.Now().Before(deadline), "the waiter still waits for the claim left behind: the renewals did not delete it")
		}
	}
	assert.Zero(t, rows(t, schema, "k"))
}
