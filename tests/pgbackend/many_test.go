package pgbackend_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// Holding 10,000 locks costs one lease, renewed by one statement per
// interval, the pool's connections plus one listener, and no goroutine per
// lock.
func TestTenThousandLocksOneLease(t *testing.T) {
	const locks, workers, poolSize = 10000, 16, 8
	schema := uniqueSchema(t)
	p := shared.Pool(t, database(t), "many", func(c *pgxpool.Config) { c.MaxConns = poolSize })
	ctx := testCtx(t, 5*time.Minute)
	b, err := postgres.New(ctx, p, postgres.WithSchema(schema))
	require.NoError(t, err)
	defer b.Close()
	c, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: 30 * time.Second}, b)
	require.NoError(t, err)
	defer c.Close(context.Background())

	baseline := runtime.NumGoroutine()
	guards := make([]*ashlock.Guard, locks)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < locks; i += workers {
				g, err := c.Lock(fmt.Sprintf("many/%d", i)).Acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				guards[i] = g
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	s := pgx.Identifier{schema}.Sanitize()
	check := pool(t, "many-check")
	var claims, leases int
	require.NoError(t, check.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), count(DISTINCT lease_id) FROM %s.claims`, s)).Scan(&claims, &leases))
	assert.Equal(t, locks, claims)
	assert.Equal(t, 1, leases, "the locks are spread over several leases")
	var conns int
	require.NoError(t, check.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'many'`).Scan(&conns))
	assert.LessOrEqual(t, conns, poolSize+1, "connections: the pool's and one listener")
	assert.Less(t, runtime.NumGoroutine()-baseline, 50, "goroutines grew with the number of locks")

	// A renewal of the lease is one statement, whatever it holds.
	cl, err := guards[0].Claim()
	require.NoError(t, err)
	ttl, err := b.KeepAlive(ctx, cl.Lease)
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, ttl)
	for _, g := range guards {
		require.NoError(t, g.Err())
	}
	require.NoError(t, c.Close(ctx))
	require.NoError(t, check.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.claims`, s)).Scan(&claims))
	assert.Zero(t, claims)
}
