package pgbackend_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// waitBound bounds every wait of these tests.
const waitBound = 10 * time.Second

// lossBound is how soon a guard must be poisoned after an operator's
// delete: the target is 100ms, the bound looser for a loaded machine
// under the race detector, and far below the lease's 30s.
const lossBound = time.Second

// client returns a root client on its own Backend in schema, closed in
// t.Cleanup.
func client(t *testing.T, schema string) (*ashlock.LockClient, *postgres.Backend) {
	t.Helper()
	b, _ := newBackend(t, schema)
	c, err := ashlock.ConnectWith(testCtx(t, waitBound), ashlock.LockConfig{DefaultTTL: 30 * time.Second}, b)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	return c, b
}

// The root client works on the backend: a lock excludes a second client
// until released, tokens grow, Inspect and Do work.
func TestClientSmoke(t *testing.T) {
	schema := uniqueSchema(t)
	c1, _ := client(t, schema)
	c2, _ := client(t, schema)
	ctx := testCtx(t, waitBound)

	g1, err := c1.Lock("orders/42").WithOwner("one").Acquire(ctx)
	require.NoError(t, err)
	_, err = c2.Lock("orders/42").TryAcquire(ctx)
	require.ErrorIs(t, err, ashlock.ErrLocked)
	info, err := c2.Inspect(ctx, "orders/42")
	require.NoError(t, err)
	assert.True(t, info.Held)
	assert.Equal(t, "one", info.Owner)

	got := make(chan *ashlock.Guard, 1)
	go func() {
		g, err := c2.Lock("orders/42").Acquire(ctx)
		assert.NoError(t, err)
		got <- g
	}()
	t1, err := g1.FencingToken()
	require.NoError(t, err)
	require.NoError(t, g1.Unlock(ctx))
	select {
	case g2 := <-got:
		require.NotNil(t, g2)
		t2, err := g2.FencingToken()
		require.NoError(t, err)
		assert.Greater(t, t2, t1)
		require.NoError(t, g2.Unlock(ctx))
	case <-time.After(waitBound):
		t.Fatal("the waiter did not get the lock after the release")
	}
	require.NoError(t, c1.Lock("orders/4").Do(ctx, func(ctx context.Context, token uint64) error {
		assert.NotZero(t, token)
		return nil
	}))
}

// An operator's DELETE of the lease row, or of the claim row, poisons the
// guard promptly through the listener: Done closes and Err is
// ErrLeaseExpired, long before the lease's TTL.
func TestOperatorDeletePoisons(t *testing.T) {
	for _, tt := range []struct {
		name, sql string
		args      func(lease int64, key string, token uint64) []any
	}{
		{"LeaseRow", "DELETE FROM %s.leases WHERE id = $1", func(l int64, _ string, _ uint64) []any { return []any{l} }},
		{"ClaimRow", "DELETE FROM %s.claims WHERE key = $1 AND token = $2", func(_ int64, k string, tok uint64) []any { return []any{k, int64(tok)} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			schema := uniqueSchema(t)
			c, _ := client(t, schema)
			operator := pool(t, "operator")
			ctx := testCtx(t, waitBound)
			g, err := c.Lock("victim").Acquire(ctx)
			require.NoError(t, err)
			other, err := c.Lock("bystander").WithTTL(20 * time.Second).Acquire(ctx)
			require.NoError(t, err)
			claim, err := g.Claim()
			require.NoError(t, err)

			tag, err := operator.Exec(ctx, fmt.Sprintf(tt.sql, schema), tt.args(int64(claim.Lease), claim.Key, claim.Token)...)
			require.NoError(t, err)
			require.EqualValues(t, 1, tag.RowsAffected())
			at := time.Now()
			select {
			case <-g.Done():
				t.Logf("poisoned %v after the delete", time.Since(at))
			case <-time.After(lossBound):
				t.Fatalf("guard not poisoned within %v of the delete", lossBound)
			}
			assert.ErrorIs(t, g.Err(), ashlock.ErrLeaseExpired)
			_, err = g.FencingToken()
			assert.ErrorIs(t, err, ashlock.ErrLeaseExpired)
			assert.NoError(t, other.Err(), "a guard on another lease was poisoned")

			// The key is free for the next holder, with a higher token.
			g2, err := c.Lock("victim").TryAcquire(ctx)
			require.NoError(t, err)
			t2, _ := g2.FencingToken()
			assert.Greater(t, t2, claim.Token)
			require.NoError(t, g2.Unlock(ctx))
			if err := g.Unlock(ctx); err != nil {
				assert.ErrorIs(t, err, ashlock.ErrLeaseExpired)
			}
		})
	}
}
