package pgfence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/fencing"
	"github.com/ash-lock/ashlock/fencing/pgfence"
)

// admit runs one admission in a transaction of its own, committed when it
// succeeds and rolled back when refused.
func admit(t *testing.T, p *pgxpool.Pool, f *pgfence.Fence, shared bool, resource string, token uint64) error {
	t.Helper()
	ctx := testCtx(t)
	err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if shared {
			return f.AdmitShared(ctx, tx, resource, token)
		}
		return f.Admit(ctx, tx, resource, token)
	})
	if err != nil && !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("admit %d: %v", token, err)
	}
	return err
}

// The rules of fencing.Fence, step by step, against an in-memory Fence
// given the same steps: both decide alike, with the same reported marks.
func TestSameRulesAsFencingFence(t *testing.T) {
	p, f := setup(t)
	var mem fencing.Fence
	steps := []struct {
		shared bool
		token  uint64
	}{
		{false, 5}, {false, 4}, {false, 5}, {true, 6}, {false, 5}, {true, 5}, {true, 3},
		{false, 7}, {true, 6}, {true, 9}, {true, 8}, {false, 8}, {false, 9}, {false, 10}, {true, 10},
	}
	for _, s := range steps {
		want := mem.Admit
		if s.shared {
			want = mem.AdmitShared
		}
		werr := want("r", s.token)
		gerr := admit(t, p, f, s.shared, "r", s.token)
		require.Equal(t, werr == nil, gerr == nil, "shared %v token %d: fencing.Fence %v, pgfence %v", s.shared, s.token, werr, gerr)
		if werr != nil {
			var w, g *fencing.StaleTokenError
			require.ErrorAs(t, werr, &w)
			require.ErrorAs(t, gerr, &g)
			assert.Equal(t, *w, *g)
		}
	}
	// Resources are independent, whatever their names.
	for _, r := range []string{"r2", `'; DROP TABLE ashlock.fences; --`, "日本", ""} {
		assert.NoError(t, admit(t, p, f, false, r, 1))
	}
	assert.Error(t, admit(t, p, f, false, "r", 1))
}

// A newer admission waits for an open transaction that admitted for the
// same resource and is then decided against what it committed; a refusal
// or a rollback changes nothing.
func TestAdmitSerialisesWithOpenTransaction(t *testing.T) {
	p, f := setup(t)
	ctx := testCtx(t)
	require.NoError(t, admit(t, p, f, false, "r", 3))

	tx, err := p.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	require.NoError(t, f.Admit(ctx, tx, "r", 5))

	stale := make(chan error, 1)
	go func() { stale <- admitStale(ctx, p, f, 4) }()
	select {
	case err := <-stale:
		t.Fatalf("an older token was decided (%v) while a newer one's transaction was open", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	assert.ErrorIs(t, <-stale, fencing.ErrStaleToken)

	// A rolled-back admission leaves the marks as they were.
	tx2, err := p.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, f.Admit(ctx, tx2, "r", 9))
	require.NoError(t, tx2.Rollback(ctx))
	assert.NoError(t, admit(t, p, f, false, "r", 6))
}

func admitStale(ctx context.Context, p *pgxpool.Pool, f *pgfence.Fence, token uint64) error {
	return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { return f.Admit(ctx, tx, "r", token) })
}

// Shared holders do not wait for one another: two open transactions both
// admit their readers at once.
func TestSharedHoldersDoNotBlockEachOther(t *testing.T) {
	p, f := setup(t)
	ctx := testCtx(t)
	require.NoError(t, admit(t, p, f, false, "r", 2))
	require.NoError(t, admit(t, p, f, true, "r", 4))
	var txs []pgx.Tx
	for range 2 {
		tx, err := p.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(context.Background())
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		require.NoError(t, f.AdmitShared(short, tx, "r", 3), "a reader waited for another")
		cancel()
		txs = append(txs, tx)
	}
	for _, tx := range txs {
		require.NoError(t, tx.Commit(ctx))
	}
}

// The marks are rows: a new Fence (another process) sees them, and a
// token too large for bigint is refused.
func TestMarksPersist(t *testing.T) {
	p, f := setup(t)
	require.NoError(t, admit(t, p, f, false, "r", 10))
	g, err := pgfence.New(testCtx(t), p)
	require.NoError(t, err)
	assert.ErrorIs(t, admit(t, p, g, false, "r", 9), fencing.ErrStaleToken)
	err = pgx.BeginFunc(testCtx(t), p, func(tx pgx.Tx) error { return g.Admit(testCtx(t), tx, "r", 1<<63) })
	assert.ErrorIs(t, err, pgfence.ErrTokenRange)
	_, err = pgfence.New(testCtx(t), p, pgfence.WithSchema(`x"; drop`))
	assert.ErrorIs(t, err, pgfence.ErrInvalidSchema)
}
