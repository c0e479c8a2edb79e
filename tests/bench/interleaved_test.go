package bench_test

import (
	"testing"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// BenchmarkUncontendedInterleaved measures the cycles of
// BenchmarkUncontended against one etcd member in one process, taking
// turns: each implementation runs benchrun.TurnLength cycles, then the
// next. One b.Loop iteration is a round of turns in which every
// implementation follows every other one exactly once (see
// benchrun.TurnOrder), rounds following each other without a seam: what
// one leaves behind for the next (warm or cold caches, a timer, garbage)
// falls on each of the others alike. The clients are set up in a random
// order. Each implementation's time is summed over its own turns only.
//
// It reports, per implementation, ns per cycle ("<impl>-ns/cycle") and
// requests per cycle ("<impl>-rpcs/cycle", lease keep-alives excepted), and
// the ratios the targets are about: "ashlock/etcd-mutex" and
// "ashlock/raw-2puts". raw-txn+delete is ashlock's own protocol sent by
// hand (its enqueue Txn, then a Delete): the least any client of that
// protocol can cost, so "raw-txn+delete/raw-2puts" is the protocol's
// floor over two Puts and "ashlock/raw-txn+delete" what the library adds
// on top of its requests. Taken in turns 16 ms apart, the implementations
// share every stretch of the machine's time, so the ratios are measured
// far more closely than from separate runs. ashlock-twin is a second
// ashlock client of its own, measured like the others:
// "ashlock/ashlock-twin" shows how far from 1.0 the method puts two
// identical implementations. ns/op is the time of one round and means
// nothing by itself.
func BenchmarkUncontendedInterleaved(b *testing.B) {
	impls := []benchrun.Impl[cycle]{
		{Name: "ashlock", Make: ashlockCycle()},
		{Name: "ashlock-twin", Make: ashlockCycle()},
		{Name: "etcd-mutex", Make: mutexCycle},
		{Name: "raw-2puts", Make: rawPutsCycle},
		{Name: "raw-txn+delete", Make: rawCycle(releasePlain)},
	}
	perCycle := benchrun.Interleave(runCtx(b), b, impls)
	b.ReportMetric(perCycle[0]/perCycle[1], "ashlock/ashlock-twin")
	b.ReportMetric(perCycle[0]/perCycle[2], "ashlock/etcd-mutex")
	b.ReportMetric(perCycle[0]/perCycle[3], "ashlock/raw-2puts")
	b.ReportMetric(perCycle[0]/perCycle[4], "ashlock/raw-txn+delete")
	b.ReportMetric(perCycle[4]/perCycle[3], "raw-txn+delete/raw-2puts")
}
