package pgbackend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// rows counts the claims rows of key in schema.
func rows(t *testing.T, schema, key string) int {
	t.Helper()
	var n int
	require.NoError(t, pool(t, "count").QueryRow(testCtx(t, waitBound),
		fmt.Sprintf(`SELECT count(*) FROM %s.claims WHERE key = $1`, pgx.Identifier{schema}.Sanitize()), key).Scan(&n))
	return n
}

// awaitRows waits until key has n claims rows in schema: the removal of
// what an Acquire whose context ended left goes on after it has returned
// (see discard in backend/postgres), so a test waits for it, bounded.
func awaitRows(t *testing.T, schema, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		got := rows(t, schema, key)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q has %d claims rows, want %d within %v", key, got, n, waitBound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Cancelled and timed-out waits of every kind leave no row behind, nor do
// refused TryAcquires and permit mismatches (whose removal is done when
// Acquire returns).
func TestCancelledWaitsLeaveNoRow(t *testing.T) {
	schema := uniqueSchema(t)
	b, _ := newBackend(t, schema)
	ctx := testCtx(t, waitBound)
	l, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)
	req := func(key, id string) backend.AcquireRequest {
		return backend.AcquireRequest{Key: key, ID: id, Lease: l.ID, Owner: id, Wait: true, Fair: true}
	}
	holder, err := b.Acquire(ctx, req("k", "holder"))
	require.NoError(t, err)
	counted, err := b.Acquire(ctx, backend.AcquireRequest{Key: "c", ID: "c0", Lease: l.ID, Permits: 1, Wait: true, Fair: true})
	require.NoError(t, err)

	for _, tt := range []struct {
		name string
		r    backend.AcquireRequest
	}{
		{"fair", req("k", "fair")},
		{"unfair", func() backend.AcquireRequest { r := req("k", "unfair"); r.Fair = false; return r }()},
		{"shared", func() backend.AcquireRequest { r := req("k", "shared"); r.Shared = true; return r }()},
		{"multi", func() backend.AcquireRequest { r := req("a", "multi"); r.Keys = []string{"a", "k"}; return r }()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := b.Acquire(wctx, tt.r)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.False(t, errors.Is(err, backend.ErrLocked))
			awaitRows(t, schema, "k", 1) // the holder's
			awaitRows(t, schema, "a", 0)
		})
	}
	try := req("k", "try")
	try.Wait = false
	_, err = b.Acquire(ctx, try)
	require.ErrorIs(t, err, backend.ErrLocked)
	_, err = b.Acquire(ctx, backend.AcquireRequest{Key: "c", ID: "c1", Lease: l.ID, Permits: 3, Wait: true, Fair: true})
	require.ErrorIs(t, err, backend.ErrPermitMismatch)
	assert.Equal(t, 1, rows(t, schema, "k"))
	assert.Equal(t, 1, rows(t, schema, "c"))
	require.NoError(t, b.Release(ctx, holder))
	require.NoError(t, b.Release(ctx, counted))
	assert.Equal(t, 0, rows(t, schema, "k"))
	assert.Equal(t, 0, rows(t, schema, "c"))
}
