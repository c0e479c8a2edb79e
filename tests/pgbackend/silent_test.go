package pgbackend_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
	"github.com/ash-lock/ashlock/tests/pgtest"
)

// listenerPing is the liveness interval of the listeners these tests
// silence, and silentBound how soon after a silent drop the Backend must
// act: two intervals (the silence, then the unanswered round trip) and
// slack for the reconnection and the checks that follow it. TCP keepalive
// alone would take minutes.
const (
	listenerPing = 250 * time.Millisecond
	silentBound  = 2*listenerPing + 2*time.Second
)

// silentBackend returns a Backend in schema whose pool reaches the server
// directly and whose listener goes through a proxy of its own, so that
// the proxy's Drop silences the listener alone, and a channel of the
// listener gaps it reports.
func silentBackend(t *testing.T, schema, app string) (*postgres.Backend, *pgtest.Proxy, <-chan [2]time.Time) {
	t.Helper()
	proxy := shared.ProxyT(t)
	lc, err := pgx.ParseConfig(proxy.DSN(database(t)))
	require.NoError(t, err)
	lc.RuntimeParams["application_name"] = app + "-listener"
	gaps := make(chan [2]time.Time, 1)
	b, err := postgres.New(testCtx(t, waitBound), pool(t, app), postgres.WithSchema(schema),
		postgres.WithListenConfig(lc), postgres.WithListenerPing(listenerPing),
		postgres.WithListenerGapHook(func(from, to time.Time) {
			select {
			case gaps <- [2]time.Time{from, to}:
			default: // the first one is enough
			}
		}))
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b, proxy, gaps
}

// A listener connection that dies without a reset (its route drops every
// byte, both sockets stay open) is found by its liveness check and opened
// again, so an operator's delete of a held claim's row, whose notification
// was lost, still reaches the holder, long before TCP keepalive would.
func TestSilentListenerDropStillPoisonsHolder(t *testing.T) {
	schema := uniqueSchema(t)
	b, proxy, gaps := silentBackend(t, schema, "silent-holder")
	ctx := testCtx(t, 3*waitBound)
	l, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)
	lost := make(chan error, 1)
	c, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "h", Lease: l.ID, Owner: "h", Wait: true, Fair: true,
		OnLost: backend.LossFunc(func(err error) { lost <- err })})
	require.NoError(t, err)

	proxy.Drop()
	dropped := time.Now()
	_, err = pool(t, "operator").Exec(ctx, fmt.Sprintf("DELETE FROM %s.claims WHERE key = $1 AND token = $2", schema), "k", int64(c.Token))
	require.NoError(t, err)
	select {
	case err := <-lost:
		require.ErrorIs(t, err, backend.ErrLeaseExpired)
		t.Logf("holder poisoned %v after its listener's route dropped", time.Since(dropped))
	case <-time.After(silentBound):
		t.Fatalf("the holder missed its claim's delete for %v after its listener's route dropped silently", silentBound)
	}
	select {
	case g := <-gaps:
		require.False(t, g[1].Before(g[0]), "a gap that ends before it begins: %v", g)
	case <-time.After(waitBound):
		t.Fatal("the Backend reported no gap of its listener")
	}
}

// A waiter whose listener's route dropped silently, and so missed the
// release of the claim it waits behind, still gets the key once the
// liveness check has opened the listener again, not at the holder's lease
// expiry.
func TestSilentListenerDropStillAdmitsWaiter(t *testing.T) {
	schema := uniqueSchema(t)
	hb, _ := newBackend(t, schema)
	wb, proxy, _ := silentBackend(t, schema, "silent-waiter")
	ctx := testCtx(t, 3*waitBound)
	_, h, got := holdAndQueue(ctx, t, hb, wb)

	proxy.Drop()
	dropped := time.Now()
	require.NoError(t, hb.Release(ctx, h))
	var w acquired
	select {
	case w = <-got:
		require.NoError(t, w.err)
		t.Logf("waiter admitted %v after its listener's route dropped", time.Since(dropped))
	case <-time.After(silentBound):
		t.Fatalf("the waiter did not get the released key within %v of a silent drop of its listener", silentBound)
	}
	require.NoError(t, wb.Release(ctx, w.claim))
}
