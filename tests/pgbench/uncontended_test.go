package pgbench_test

import (
	"context"
	"testing"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// BenchmarkUncontendedInterleaved is one client taking and giving back a
// free lock, over and over, for each implementation in turn (see
// benchrun.Interleave), each in a database of its own:
//
//   - ashlock: Acquire and Unlock of the root client (ashlock.ConnectWith)
//     on backend/postgres, with its own pool and listener;
//   - ashlock-twin: a second, identical one: "ashlock/ashlock-twin" shows
//     how far from 1.0 the method puts two identical implementations;
//   - floor: the statements the backend sends for the same cycle, by hand
//     with plain pgx on one connection: the enqueue batch (one round
//     trip) and the release DELETE;
//   - floor-listen: the floor, with a second connection that listens and
//     reads every notification, as a Backend's listener does (the claims'
//     trigger notifies the insert of a claim that holds at once, and its
//     delete): "ashlock/floor-listen" is what the library adds to the
//     protocol and its listener;
//   - advisory: pg_advisory_lock and pg_advisory_unlock on one
//     connection, the lock most PostgreSQL users take today (no lease, no
//     fencing token, no queue: see the README).
//
// Target: "ashlock/floor" at most 1.3. ns/op is the time of one round of
// turns and means nothing by itself.
func BenchmarkUncontendedInterleaved(b *testing.B) {
	impls := []benchrun.Impl[cycle]{
		{Name: "ashlock", Make: ashlockCycle},
		{Name: "ashlock-twin", Make: ashlockCycle},
		{Name: "floor", Make: floorCycle},
		{Name: "advisory", Make: advisoryCycle},
		{Name: "floor-listen", Make: floorListenCycle},
	}
	perCycle := benchrun.Interleave(runCtx(b), b, impls)
	b.ReportMetric(perCycle[0]/perCycle[2], "ashlock/floor")
	b.ReportMetric(perCycle[0]/perCycle[1], "ashlock/ashlock-twin")
	b.ReportMetric(perCycle[0]/perCycle[3], "ashlock/advisory")
	b.ReportMetric(perCycle[2]/perCycle[3], "floor/advisory")
	b.ReportMetric(perCycle[0]/perCycle[4], "ashlock/floor-listen")
}

// cycle is one implementation's take and give-back of a free lock; ctr
// counts what it sends.
type cycle struct {
	ctr *counter
	run func(context.Context) error
}

func (c cycle) Run(ctx context.Context) error { return c.run(ctx) }

// Count reports what the cycle's connections sent as
// "<impl>-stmts/cycle" and "<impl>-roundtrips/cycle" (see reportCounts).
func (c cycle) Count() func(b *testing.B, prefix string, n float64) {
	before := c.ctr.snapshot()
	return func(b *testing.B, prefix string, n float64) {
		reportCounts(b, prefix, c.ctr.snapshot().sub(before), n, "cycle")
	}
}

func ashlockCycle(b testing.TB) cycle {
	ctr := new(counter)
	lock := newAshlock(b, newDatabase(b), "uncontended-ashlock", ctr).Lock("k")
	return cycle{ctr, func(ctx context.Context) error {
		g, err := lock.Acquire(ctx)
		if err != nil {
			return err
		}
		return g.Unlock(ctx)
	}}
}

func floorCycle(b testing.TB) cycle { return floorCycleListening(b, noListen) }

func floorListenCycle(b testing.TB) cycle { return floorCycleListening(b, listenIdle) }

func floorCycleListening(b testing.TB, mode listenMode) cycle {
	ctr := new(counter)
	f := newFloorClient(b, newDatabase(b), "uncontended-floor", ctr, "k", "floor", mode)
	return cycle{ctr, func(ctx context.Context) error {
		token, err := f.acquire(ctx)
		if err != nil {
			return err
		}
		return f.release(ctx, token)
	}}
}

func advisoryCycle(b testing.TB) cycle {
	ctr := new(counter)
	conn := newConn(b, shared.NewDatabase(b), "uncontended-advisory", ctr)
	return cycle{ctr, func(ctx context.Context) error {
		if err := advisoryLock(ctx, conn); err != nil {
			return err
		}
		return advisoryUnlock(ctx, conn)
	}}
}
