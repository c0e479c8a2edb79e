package bench_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// runTimeout bounds one run of a benchmark function (one b.N round), so
// that a stuck store fails the benchmark instead of hanging it.
const runTimeout = 10 * time.Minute

// runCtx returns a context for one run of a benchmark function, cancelled
// in b.Cleanup.
func runCtx(b testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	b.Cleanup(cancel)
	return ctx
}

// reportRPCs reports what the counted clients sent per unit of work between
// two snapshots: requests (unary calls and stream messages sent, lease
// keep-alives excepted) as "rpcs/<unit>" and stream messages received
// (watch events, keep-alive answers) as "msgs-in/<unit>".
func reportRPCs(b *testing.B, before, after counts, n int, unit string) {
	if n <= 0 {
		return
	}
	d := after.sub(before)
	b.ReportMetric(float64(d.requests())/float64(n), "rpcs/"+unit)
	b.ReportMetric(float64(d.streamRecv)/float64(n), "msgs-in/"+unit)
}

// implBench is one implementation under a benchmark: run is its
// sub-benchmark, named "impl=" + name.
type implBench struct {
	name string
	run  func(*testing.B)
}

// runInTurn runs each of impls as a sub-benchmark, in the order of the
// list but starting at a random place in it. go test runs a sub-benchmark
// -count times in a row, so implementations are compared fairly only over
// several processes (see the Makefile's bench-uncontended target); run in
// a fixed order, the first of each process would always meet a freshly
// started etcd, and each the garbage its neighbour left behind.
func runInTurn(b *testing.B, impls []implBench) {
	first := rand.IntN(len(impls))
	for i := range impls {
		im := impls[(first+i)%len(impls)]
		b.Run("impl="+im.name, im.run)
	}
}
