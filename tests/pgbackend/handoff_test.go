package pgbackend_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// A release wakes the next waiter only: with waiters in Backends of their
// own, the handoff costs the next one a read and its admission, and the
// others send nothing at all.
func TestHandoffWakesOnlyTheNext(t *testing.T) {
	const waiters = 8
	schema := uniqueSchema(t)
	ctx := testCtx(t, 3*waitBound)
	hb, _ := newBackend(t, schema)
	hl, err := hb.Grant(ctx, time.Minute)
	require.NoError(t, err)
	holder, err := hb.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "h", Lease: hl.ID, Owner: "h", Wait: true, Fair: true})
	require.NoError(t, err)

	counters := make([]*counter, waiters)
	done := make([]chan backend.Claim, waiters)
	for i := range waiters {
		counters[i] = new(counter)
		p := shared.Pool(t, database(t), fmt.Sprintf("handoff-%d", i), func(c *pgxpool.Config) { c.ConnConfig.Tracer = counters[i] })
		b, err := postgres.New(ctx, p, postgres.WithSchema(schema))
		require.NoError(t, err)
		t.Cleanup(func() { b.Close() })
		l, err := b.Grant(ctx, time.Minute)
		require.NoError(t, err)
		done[i] = make(chan backend.Claim, 1)
		owner := fmt.Sprintf("w%d", i)
		go func() {
			c, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: owner, Lease: l.ID, Owner: owner, Wait: true, Fair: true})
			if err == nil {
				done[i] <- c
			}
			close(done[i])
		}()
		awaitWaiter(t, hb, "k", owner)
	}
	for _, c := range counters {
		c.take()
	}
	require.NoError(t, hb.Release(ctx, holder))
	select {
	case _, ok := <-done[0]:
		require.True(t, ok, "the first waiter failed")
	case <-time.After(waitBound):
		t.Fatal("the first waiter did not get the key")
	}
	time.Sleep(quiet) // a window for wrong wake-ups to show; nothing signals their absence
	q, bt := counters[0].take()
	assert.Equal(t, int64(2), q+bt, "the next waiter: a read and its admission")
	for i, c := range counters[1:] {
		q, bt := c.take()
		assert.Zero(t, q+bt, "waiter %d, not next, sent %d statements", i+1, q+bt)
	}
}
