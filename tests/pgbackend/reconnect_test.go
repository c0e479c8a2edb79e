package pgbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// When pg_terminate_backend cuts every connection of a Backend, its
// listener among them, a waiter still gets the key released meanwhile
// (it reads again once the listener is back), and a holder still learns
// of its claim's delete.
func TestListenerReconnects(t *testing.T) {
	schema := uniqueSchema(t)
	hb, _ := newBackendApp(t, schema, "holder")
	wb, _ := newBackendApp(t, schema, "waiter")
	ctx := testCtx(t, 3*waitBound)
	hl, h, got := holdAndQueue(ctx, t, hb, wb)

	n, err := shared.Terminate(ctx, "waiter")
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1, "no connection of the waiter's Backend was cut")
	require.NoError(t, hb.Release(ctx, h))
	var w acquired
	select {
	case w = <-got:
		require.NoError(t, w.err)
	case <-time.After(waitBound):
		t.Fatal("the waiter did not get the key after its listener was cut")
	}

	lost := make(chan error, 1)
	h2, err := hb.Acquire(ctx, backend.AcquireRequest{Key: "k2", ID: "h2", Lease: hl.ID, Owner: "h2", Wait: true, Fair: true,
		OnLost: backend.LossFunc(func(err error) { lost <- err })})
	require.NoError(t, err)
	_, err = shared.Terminate(ctx, "holder")
	require.NoError(t, err)
	require.NoError(t, wb.Revoke(ctx, hl.ID)) // from the other Backend: a loss for h2's
	select {
	case err := <-lost:
		require.ErrorIs(t, err, backend.ErrLeaseExpired)
	case <-time.After(waitBound):
		t.Fatal("the holder did not learn of its claim's delete after its listener was cut")
	}
	require.NoError(t, wb.Release(ctx, w.claim))
	_ = h2
}

// acquired is what an Acquire run in the background returned.
type acquired struct {
	claim backend.Claim
	err   error
}

// holdAndQueue has hb's claim "h" hold key "k" and wb's claim "w" queue
// behind it, each on a lease of a minute; it returns once the waiter is
// seen queued. The waiter's Acquire reports on got when it returns.
func holdAndQueue(ctx context.Context, t *testing.T, hb, wb backend.Backend) (hl backend.Lease, h backend.Claim, got <-chan acquired) {
	t.Helper()
	hl, err := hb.Grant(ctx, time.Minute)
	require.NoError(t, err)
	wl, err := wb.Grant(ctx, time.Minute)
	require.NoError(t, err)
	h, err = hb.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "h", Lease: hl.ID, Owner: "h", Wait: true, Fair: true})
	require.NoError(t, err)
	ch := make(chan acquired, 1)
	go func() {
		c, err := wb.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "w", Lease: wl.ID, Owner: "w", Wait: true, Fair: true})
		ch <- acquired{c, err}
	}()
	awaitWaiter(t, hb, "k", "w")
	return hl, h, ch
}

// awaitWaiter polls Inspect until owner is among key's waiters (a test's
// check from outside the Backend, which has no hook for it).
func awaitWaiter(t *testing.T, b backend.Backend, key, owner string) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		info, err := b.Inspect(testCtx(t, waitBound), key)
		require.NoError(t, err)
		for _, w := range info.Waiters {
			if w.Owner == owner {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not queued at %q within %v", owner, key, waitBound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WithListenConfig gives the listener a connection of its own config (as
// behind a transaction-mode pooler): the pool's application name is not
// on it, and the listener reconnects with its own config after it is cut.
func TestListenConfig(t *testing.T) {
	schema := uniqueSchema(t)
	p := pool(t, "lc-pool")
	lc, err := pgx.ParseConfig(shared.DSN(database(t)))
	require.NoError(t, err)
	lc.RuntimeParams["application_name"] = "lc-listener"
	ctx := testCtx(t, 2*waitBound)
	b, err := postgres.New(ctx, p, postgres.WithSchema(schema), postgres.WithListenConfig(lc))
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	l, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)

	n, err := shared.Terminate(ctx, "lc-listener")
	require.NoError(t, err)
	require.Equal(t, 1, n, "connections with the listener's config")
	lost := make(chan error, 1)
	_, err = b.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "h", Lease: l.ID, Wait: true, Fair: true,
		OnLost: backend.LossFunc(func(err error) { lost <- err })})
	require.NoError(t, err)
	awaitListening(t, "lc-listener")
	require.NoError(t, b.Revoke(ctx, l.ID))
	select {
	case <-lost:
	case <-time.After(waitBound):
		t.Fatal("no loss reported after the listener reconnected")
	}
}

// awaitListening polls until a connection of application app is listening.
func awaitListening(t *testing.T, app string) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		var n int
		require.NoError(t, pool(t, "await").QueryRow(testCtx(t, waitBound),
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, app).Scan(&n))
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection of %s listens after %v", app, waitBound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
