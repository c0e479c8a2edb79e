package pgbench_test

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ash-lock/ashlock/tests/pgtest"
)

// shared is the server of the run; every implementation of a benchmark
// works in a database of its own on it.
var shared *pgtest.Server

// maxConnections leaves room for the largest handoff benchmark: 128
// contenders of each implementation at once, with up to two connections
// each (ashlock's: a pool connection, sometimes two, and a listener).
const maxConnections = "max_connections=1000"

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		// No benchmark to run: no server either.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(pgtest.WithShared{M: m, Shared: &shared, Settings: []string{maxConnections}})
}

// runTimeout bounds one run of a benchmark function (one b.N round), so
// that a stuck server fails the benchmark instead of hanging it.
const runTimeout = 10 * time.Minute

// runCtx returns a context for one run of a benchmark function, cancelled
// in b.Cleanup.
func runCtx(b testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	b.Cleanup(cancel)
	return ctx
}

// callCtx bounds one setup call.
func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}
