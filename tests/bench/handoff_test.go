package bench_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// waiterCounts are the queue lengths BenchmarkHandoff measures.
var waiterCounts = []int{8, 32, 128}

// handoffSetup makes n contenders for one key under prefix, each on its own
// etcd client counted by ctr.
type handoffSetup func(b *testing.B, ctr *rpcCounter, prefix string, n int) []benchrun.Take

// BenchmarkHandoff has N contenders, one client each, take turns on one key
// with an empty critical section. A contender that releases asks again as
// soon as another contender has taken the lock, so every acquisition is a
// real handoff from one client to another and N-1 contenders are waiting
// (or about to) at any time. Without that rule an unfair lock such as naive
// mostly hands the key back to the client that just released it, which
// measures barging, not handoff. ns/op is the time per handoff; metrics:
// handoffs/s, rpcs/handoff (requests sent by all clients together) and
// msgs-in/handoff (watch events and other stream messages received).
//
// Targets: ashlock's handoffs/s at least etcd-mutex's at each size, and
// rpcs/handoff constant in N. naive is the put-if-absent-and-watch lock
// whose herd of waiters the queue avoids.
func BenchmarkHandoff(b *testing.B) {
	impls := []struct {
		name  string
		setup handoffSetup
	}{
		{"ashlock", ashlockContenders},
		{"etcd-mutex", mutexContenders},
		{"naive", naiveContenders},
	}
	for _, n := range waiterCounts {
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			for _, impl := range impls {
				b.Run("impl="+impl.name, func(b *testing.B) {
					var ctr rpcCounter
					cycles := impl.setup(b, &ctr, newPrefix("handoff"), n)
					runHandoff(b, &ctr, cycles)
				})
			}
		})
	}
}

func ashlockContenders(b *testing.B, ctr *rpcCounter, prefix string, n int) []benchrun.Take {
	cycles := make([]benchrun.Take, n)
	for i, cli := range contenderClients(b, ctr, n) {
		c, _ := newAshlock(b, cli, prefix)
		cycles[i] = benchrun.Acquire(c.Lock("k"))
	}
	return cycles
}

func mutexContenders(b *testing.B, ctr *rpcCounter, prefix string, n int) []benchrun.Take {
	cycles := make([]benchrun.Take, n)
	for i, cli := range contenderClients(b, ctr, n) {
		m := concurrency.NewMutex(newSession(b, cli, 0), prefix+"k")
		cycles[i] = func(ctx context.Context) (func(context.Context) error, error) {
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return m.Unlock, nil
		}
	}
	return cycles
}

func naiveContenders(b *testing.B, ctr *rpcCounter, prefix string, n int) []benchrun.Take {
	cycles := make([]benchrun.Take, n)
	for i, cli := range contenderClients(b, ctr, n) {
		l := &naiveLock{cli: cli, key: prefix + "k", id: fmt.Sprint("holder-", i), lease: newSession(b, cli, 0).Lease()}
		cycles[i] = func(ctx context.Context) (func(context.Context) error, error) {
			if err := l.lock(ctx); err != nil {
				return nil, err
			}
			return l.unlock, nil
		}
	}
	return cycles
}

// runHandoff runs the contenders until b.N handoffs have been timed. The
// first len(cycles) acquisitions are a warm-up that fills the queue; the
// timer and the request counts cover the next b.N acquisitions only, so
// that N-1 contenders are waiting during all of the measured part (the
// ones still waiting at the end are cancelled, untimed).
func runHandoff(b *testing.B, ctr *rpcCounter, cycles []benchrun.Take) {
	err := runTurns(b, ctr, cycles, "handoff", func(before, after counts) {
		reportRPCs(b, before, after, b.N, "handoff")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handoffs/s")
	})
	if err != nil {
		b.Fatal(err)
	}
}

// runTurns runs the contenders, each taking its cycle's lock and releasing
// it once another contender has taken it after it, until b.N acquisitions
// have been timed after a warm-up of len(cycles) that fills the queue;
// then report is given the request counts from before and after the timed
// part. It stops the contenders (those still waiting are cancelled,
// untimed) and returns the first error of a contender, if any; what names
// the run in a time-out.
func runTurns(b *testing.B, ctr *rpcCounter, cycles []benchrun.Take, what string, report func(before, after counts)) error {
	b.StopTimer()
	base := runCtx(b)
	ctx, stop := context.WithCancel(base)
	defer stop()

	warm := int64(len(cycles))
	total := warm + int64(b.N)
	var count atomic.Int64
	var next benchrun.Succession
	warmed, finished := make(chan struct{}), make(chan struct{})
	failed := make(chan error, len(cycles)) // each contender sends at most once

	var wg sync.WaitGroup
	for _, cycle := range cycles {
		wg.Go(func() {
			benchrun.Contend(ctx, base, cycle, failed, func() (<-chan struct{}, bool) {
				othersTurn := next.Taken()
				switch count.Add(1) {
				case warm:
					close(warmed)
				case total:
					close(finished)
				}
				return othersTurn, true
			})
		})
	}

	err := benchrun.Await(base, warmed, failed, what)
	if err == nil {
		before := ctr.snapshot()
		b.ResetTimer()
		b.StartTimer()
		err = benchrun.Await(base, finished, failed, what)
		b.StopTimer()
		if err == nil {
			report(before, ctr.snapshot())
		}
	}
	stop()
	wg.Wait()
	return err
}
