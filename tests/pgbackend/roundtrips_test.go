package pgbackend_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// counter counts what a pool sends: single statements and batches (each
// one round trip).
type counter struct{ queries, batches atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}
func (c *counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (c *counter) take() (queries, batches int64) {
	return c.queries.Swap(0), c.batches.Swap(0)
}

// Uncontended, an Acquire is one batch and a Release one statement,
// whatever the kind of claim; a renewal is one statement.
func TestUncontendedRoundTrips(t *testing.T) {
	var n counter
	p := shared.Pool(t, database(t), "roundtrips", func(c *pgxpool.Config) {
		c.ConnConfig.Tracer = &n
		c.MaxConns = 1 // every statement on one connection, prepared once
	})
	ctx := testCtx(t, waitBound)
	b, err := postgres.New(ctx, p, postgres.WithSchema(uniqueSchema(t)))
	require.NoError(t, err)
	defer b.Close()
	l, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)
	for _, r := range []backend.AcquireRequest{
		{Key: "x", Wait: true, Fair: true},
		{Key: "s", Shared: true, Wait: true, Fair: true},
		{Key: "c", Permits: 3, Wait: true, Fair: true},
		{Key: "a", Keys: []string{"a", "b", "c2"}, Wait: true, Fair: true},
		{Key: "t", Wait: false, Fair: true},
		{Key: "u", Wait: true, Fair: false},
	} {
		r.ID, r.Lease = "id-"+r.Key, l.ID
		for round := range 2 { // the first round prepares the statements
			n.take()
			c, err := b.Acquire(ctx, r)
			require.NoError(t, err)
			aq, ab := n.take()
			require.NoError(t, b.Release(ctx, c))
			rq, rb := n.take()
			if round == 1 {
				assert.Equal(t, [2]int64{0, 1}, [2]int64{aq, ab}, "%s: Acquire sent %d statements and %d batches", r.Key, aq, ab)
				assert.Equal(t, [2]int64{1, 0}, [2]int64{rq, rb}, "%s: Release sent %d statements and %d batches", r.Key, rq, rb)
			}
		}
	}
	n.take()
	_, err = b.KeepAlive(ctx, l.ID)
	require.NoError(t, err)
	q, bt := n.take()
	assert.Equal(t, [2]int64{1, 0}, [2]int64{q, bt})
}
