package pgbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// A holder cut off from the server by a partition (a proxy that drops
// every byte) is poisoned by its own deadline before a rival, which waits
// for the lease to expire by the server's clock, acquires the key.
func TestCutOffHolderPoisonedBeforeRival(t *testing.T) {
	schema := uniqueSchema(t)
	proxy := shared.ProxyT(t)
	cfg, err := pgxpool.ParseConfig(proxy.DSN(database(t)))
	require.NoError(t, err)
	ctx := testCtx(t, 3*waitBound)
	hp, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(hp.Close)
	hb, err := postgres.New(ctx, hp, postgres.WithSchema(schema))
	require.NoError(t, err)
	t.Cleanup(func() { hb.Close() })
	holder, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: 3 * time.Second}, hb)
	require.NoError(t, err)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		holder.Close(cctx)
	})
	// Runs first: the holder's connections fail at once rather than
	// waiting out what the blackhole swallowed.
	t.Cleanup(func() { proxy.Close() })

	g, err := holder.Lock("k").Acquire(ctx)
	require.NoError(t, err)
	proxy.Blackhole(true)
	cut := time.Now()

	rb, _ := newBackend(t, schema)
	l, err := rb.Grant(ctx, time.Minute)
	require.NoError(t, err)
	c, err := rb.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "rival", Lease: l.ID, Owner: "rival", Wait: true, Fair: true})
	require.NoError(t, err)
	took := time.Since(cut)
	select {
	case <-g.Done():
	default:
		t.Fatalf("the rival acquired %v after the cut while the cut-off holder's guard was still valid", took)
	}
	require.ErrorIs(t, g.Err(), ashlock.ErrLeaseExpired)
	t.Logf("rival acquired %v after the cut", took)
	require.NoError(t, rb.Release(ctx, c))
}
