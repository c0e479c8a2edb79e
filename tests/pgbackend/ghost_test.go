package pgbackend_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// A claim that holds at once, and is deleted before its Acquire has read
// the enqueue's reply, while the listener is down (both notifications
// lost), and whose Acquire reads that reply only after the listener is
// back and has had every claim it knew of checked: the Acquire must not
// return a claim that is gone without ever telling its OnLost.
func TestClaimDeletedWhileListenerDownBeforeAcquireReturns(t *testing.T) {
	schema := uniqueSchema(t)
	direct, admin := newBackend(t, schema)
	poolProxy, listenProxy := shared.ProxyT(t), shared.ProxyT(t)
	ctx := testCtx(t, 4*waitBound)
	cfg, err := pgxpool.ParseConfig(poolProxy.DSN(database(t)))
	require.NoError(t, err)
	ap, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(ap.Close)
	lc, err := pgx.ParseConfig(listenProxy.DSN(database(t)))
	require.NoError(t, err)
	resynced := make(chan struct{}, 1)
	b, err := postgres.New(ctx, ap, postgres.WithSchema(schema), postgres.WithListenConfig(lc),
		postgres.WithListenerGapHook(func(_, _ time.Time) {
			select {
			case resynced <- struct{}{}:
			default:
			}
		}))
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	table := pgx.Identifier{schema}.Sanitize()

	_, tx := holdKeyRow(t, ctx, direct, admin, schema)
	bl, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)

	type result struct {
		c   backend.Claim
		err error
	}
	done := make(chan result, 1)
	lost := make(chan error, 1)
	go func() {
		c, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "ghost", Lease: bl.ID, Wait: true, Fair: true,
			OnLost: backend.LossFunc(func(err error) { lost <- err })})
		done <- result{c, err}
	}()
	awaitBlockedOnLock(t, admin)
	poolProxy.Hold(true) // the enqueue's reply waits
	listenProxy.Hold(true)
	listenProxy.Sever() // the listener is down until the hold ends
	require.NoError(t, tx.Commit(ctx))
	deadline := time.Now().Add(waitBound)
	for {
		var n int
		require.NoError(t, admin.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.claims WHERE key = 'k'`, table)).Scan(&n))
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the enqueue did not commit within %v", waitBound)
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err = admin.Exec(ctx, fmt.Sprintf(`DELETE FROM %s.claims WHERE key = 'k'`, table))
	require.NoError(t, err)
	listenProxy.Hold(false)
	select {
	case <-resynced:
	case <-time.After(waitBound):
		t.Fatalf("the listener did not reconnect within %v", waitBound)
	}
	poolProxy.Hold(false)

	var r result
	select {
	case r = <-done:
	case <-time.After(waitBound):
		t.Fatalf("Acquire did not return within %v", waitBound)
	}
	if r.err != nil {
		require.ErrorIs(t, r.err, backend.ErrLeaseExpired)
		return
	}
	select {
	case err := <-lost:
		require.ErrorIs(t, err, backend.ErrLeaseExpired)
	case <-time.After(waitBound):
		t.Fatalf("Acquire returned token %d, whose row is gone, and OnLost was not called within %v", r.c.Token, waitBound)
	}
}
