package pgbackend_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// fenceSetup makes a backend, a lease and a holder of key, and a pool for
// the caller's transactions.
func fenceSetup(t *testing.T, ttl time.Duration) (*postgres.Backend, *pgxpool.Pool, backend.Claim, string) {
	t.Helper()
	schema := uniqueSchema(t)
	b, _ := newBackend(t, schema)
	app := pool(t, "app")
	ctx := testCtx(t, waitBound)
	l, err := b.Grant(ctx, ttl)
	require.NoError(t, err)
	c, err := b.Acquire(ctx, backend.AcquireRequest{Key: "account/1", ID: "holder", Lease: l.ID, Owner: "holder", Wait: true, Fair: true})
	require.NoError(t, err)
	return b, app, c, schema
}

// startRival starts a waiting Acquire of key on a lease of its own and
// returns a channel that yields its outcome.
func startRival(t *testing.T, b *postgres.Backend, key string) <-chan error {
	t.Helper()
	ctx := testCtx(t, 2*waitBound)
	l, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, ID: "rival", Lease: l.ID, Owner: "rival", Wait: true, Fair: true})
		done <- err
	}()
	return done
}

// quiet is how long a test watches for a rival that must not get in.
const quiet = 500 * time.Millisecond

// A transaction that passed Fence keeps every rival out until it ends,
// even when the holder's lease expires and is revoked meanwhile; the
// holder's renewals are not blocked by it.
func TestFenceHoldsOffTakeover(t *testing.T) {
	b, app, c, schema := fenceSetup(t, time.Minute)
	ctx := testCtx(t, 2*waitBound)
	tx, err := app.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	require.NoError(t, b.Fence(ctx, tx, c.Key, c.Token))

	// Renewal goes through while tx is open.
	renewCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = b.KeepAlive(renewCtx, c.Lease)
	cancel()
	require.NoError(t, err, "a renewal was blocked by the fenced transaction")

	// The holder's lease expires (the rival tries to reap it) and an
	// operator revokes it (the revoke waits for tx too: in the background).
	expire(t, app, schema, c.Lease)
	rival := startRival(t, b, c.Key)
	revoked := make(chan error, 1)
	go func() { revoked <- b.Revoke(ctx, c.Lease) }()
	select {
	case err := <-rival:
		t.Fatalf("rival acquired (%v) while a fenced transaction was open", err)
	case <-time.After(quiet):
	}
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-rival:
		require.NoError(t, err)
	case <-time.After(waitBound):
		t.Fatal("rival did not acquire after the fenced transaction ended")
	}
	require.NoError(t, <-revoked)
}

// After a takeover Fence refuses the old token, in a pgx and in a
// database/sql transaction; the new holder passes.
func TestFenceFailsAfterTakeover(t *testing.T) {
	b, app, c, _ := fenceSetup(t, time.Minute)
	ctx := testCtx(t, waitBound)
	rival := startRival(t, b, c.Key)
	require.NoError(t, b.Revoke(ctx, c.Lease))
	require.NoError(t, <-rival)

	err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error { return b.Fence(ctx, tx, c.Key, c.Token) })
	assert.ErrorIs(t, err, backend.ErrLeaseExpired)

	db := stdlib.OpenDBFromPool(app)
	defer db.Close()
	stx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer stx.Rollback()
	assert.ErrorIs(t, b.FenceSQL(ctx, stx, c.Key, c.Token), backend.ErrLeaseExpired)

	info, err := b.Inspect(ctx, c.Key)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error { return b.Fence(ctx, tx, c.Key, info.Token) }))
	sqlTx, err := db.BeginTx(ctx, &sql.TxOptions{})
	require.NoError(t, err)
	defer sqlTx.Rollback()
	assert.NoError(t, b.FenceSQL(ctx, sqlTx, c.Key, info.Token))
}

// expire makes a lease expired by the server's clock, as if its TTL had
// passed without a renewal; nobody deletes it.
func expire(t *testing.T, p *pgxpool.Pool, schema string, lease backend.LeaseID) {
	t.Helper()
	tag, err := p.Exec(testCtx(t, waitBound), fmt.Sprintf(`UPDATE %s.leases SET expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`,
		pgx.Identifier{schema}.Sanitize()), int64(lease))
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// Fence refuses a token whose lease has expired by the server's clock,
// even before anyone deleted it, and a renewal does not revive it.
func TestFenceRefusesExpiredLease(t *testing.T) {
	b, app, c, schema := fenceSetup(t, time.Minute)
	ctx := testCtx(t, waitBound)
	expire(t, app, schema, c.Lease)
	err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error { return b.Fence(ctx, tx, c.Key, c.Token) })
	assert.ErrorIs(t, err, backend.ErrLeaseExpired)
	_, err = b.KeepAlive(ctx, c.Lease)
	assert.ErrorIs(t, err, backend.ErrLeaseExpired)
}

// The negative control: the same check without the row locks lets a
// rival in while the "fenced" transaction is still open, which is what
// Fence's locks prevent.
func TestFenceWithoutRowLocksLetsRivalIn(t *testing.T) {
	b, app, c, schema := fenceSetup(t, time.Minute)
	ctx := testCtx(t, waitBound)
	tx, err := app.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	s := pgx.Identifier{schema}.Sanitize()
	var one int
	require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf(`SELECT 1 FROM %[1]s.claims c JOIN %[1]s.leases l ON l.id = c.lease_id
		WHERE c.key = $1 AND c.token = $2 AND c.admitted AND l.expires_at > clock_timestamp()`, s), c.Key, int64(c.Token)).Scan(&one))

	rival := startRival(t, b, c.Key)
	require.NoError(t, b.Revoke(ctx, c.Lease), "the revoke was held off without row locks")
	select {
	case err := <-rival:
		require.NoError(t, err, "the rival acquired while the unlocked check's transaction was open, as expected")
	case <-time.After(waitBound):
		t.Fatal("the rival did not get in: the negative control shows nothing")
	}
}
