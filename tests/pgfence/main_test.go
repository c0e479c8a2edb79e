package pgfence_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/ash-lock/ashlock/fencing/pgfence"
	"github.com/ash-lock/ashlock/tests/pgtest"
)

var shared *pgtest.Server

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.WithShared{M: m, Shared: &shared})
}

// setup returns a pool on a fresh database and a Fence on it.
func setup(t *testing.T) (*pgxpool.Pool, *pgfence.Fence) {
	t.Helper()
	p := shared.Pool(t, shared.NewDatabase(t), "pgfence", nil)
	f, err := pgfence.New(testCtx(t), p)
	if err != nil {
		t.Fatal(err)
	}
	return p, f
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
