package redisbench_test

import (
	"context"
	"testing"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// BenchmarkReaderJoin measures a reader's Acquire+Unlock on a key that
// another reader holds throughout (ashlock-reader-joins), beside the same
// cycle on a key nobody else holds (ashlock-alone), taking turns in one
// process (see benchrun.Interleave). A reader that joins readers is free
// as its enqueue finds the queue; "joins/alone" is what joining costs on
// top of the uncontended cycle.
func BenchmarkReaderJoin(b *testing.B) {
	setFsync(b)
	impls := []benchrun.Impl[cycle]{
		{Name: "ashlock-reader-joins", Make: readerJoinsCycle},
		{Name: "ashlock-alone", Make: readerAloneCycle},
	}
	perCycle := benchrun.Interleave(runCtx(b), b, impls)
	b.ReportMetric(perCycle[0]/perCycle[1], "joins/alone")
}

func readerJoinsCycle(b testing.TB) cycle {
	prefix := newPrefix("rj")
	held, err := newAshlock(b, newClient(b, nil), prefix).Lock("k").Shared().Acquire(runCtx(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = held.Unlock(context.Background()) })
	return lockCycle(b, prefix, true)
}

func readerAloneCycle(b testing.TB) cycle { return lockCycle(b, newPrefix("ra"), true) }
