package pgbackend_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/ash-lock/ashlock/backend/postgres"
	"github.com/ash-lock/ashlock/tests/pgtest"
)

// shared is the server every test uses; each test keeps to a schema of its
// own in database db.
var shared *pgtest.Server

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.WithShared{M: m, Shared: &shared})
}

var (
	dbOnce sync.Once
	dbName string
)

// database returns the package's database, created on first use.
func database(t testing.TB) string {
	dbOnce.Do(func() { dbName = shared.NewDatabase(t) })
	return dbName
}

var schemaSeq atomic.Int64

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// uniqueSchema returns a schema name no other test uses, readable in psql.
func uniqueSchema(t testing.TB) string {
	name := nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	s := fmt.Sprintf("t%d_%s", schemaSeq.Add(1), name)
	if len(s) > 50 {
		s = s[:50]
	}
	return s
}

// pool returns a pool on the package's database with application name
// app, closed in t.Cleanup.
func pool(t testing.TB, app string) *pgxpool.Pool {
	t.Helper()
	return shared.Pool(t, database(t), app, nil)
}

// newBackend returns a Backend on a pool of its own in schema, both closed
// in t.Cleanup (the Backend first).
func newBackend(t testing.TB, schema string) (*postgres.Backend, *pgxpool.Pool) {
	t.Helper()
	return newBackendApp(t, schema, "ashlock-"+schema)
}

// newBackendApp is newBackend whose connections (listener included) have
// application name app, for pgtest's Terminate.
func newBackendApp(t testing.TB, schema, app string) (*postgres.Backend, *pgxpool.Pool) {
	t.Helper()
	p := pool(t, app)
	b, err := postgres.New(testCtx(t, 30*time.Second), p, postgres.WithSchema(schema))
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b, p
}

// testCtx returns a context that ends after d or with the test.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
