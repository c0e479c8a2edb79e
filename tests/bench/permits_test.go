package bench_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

const (
	// benchPermits is the permit count of BenchmarkPermitHandoff's counted
	// lock.
	benchPermits = 4
	// permitHold is how long a contender of BenchmarkPermitHandoff holds
	// its permit. With an empty critical section a holder releases before
	// the next admission completes and the key is never held by more than
	// one guard; a hold longer than an admission keeps all 4 permits held
	// and the waiters queued behind them.
	permitHold = 5 * time.Millisecond
)

// BenchmarkPermitHandoff is BenchmarkHandoff for a counted lock: N
// contenders (waiterCounts: 8, 32, 128), one client each, take turns on
// one key of WithPermits(4) with an empty critical section, so that up to
// 4 hold at once and the other N-4 wait (or are about to). As in
// BenchmarkHandoff, a contender that has released asks again only once
// another contender has taken a permit after it, so every admission
// follows a release by another client. The baseline, in the same run, is
// the plain exclusive lock with the same rule (permits=1, as in
// BenchmarkHandoff). ns/op is the time per admission.
//
// Metrics: "admissions/s"; "rpcs/admission" (requests sent by all clients
// together, lease keep-alives excepted) and "msgs-in/admission" (stream
// messages received); "watch-msgs/release", the stream messages received
// other than keep-alive answers, per release (one release per admission,
// so it is msgs-in/admission less the keep-alive answers); and
// "peak-holders", the most guards seen holding at once (at most 4; a
// permit held by two guards at once fails the benchmark). Target:
// rpcs/admission and watch-msgs/release constant in N.
func BenchmarkPermitHandoff(b *testing.B) {
	for _, n := range waiterCounts {
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			for _, permits := range []int{benchPermits, 1} {
				b.Run(fmt.Sprintf("impl=ashlock-permits=%d", permits), func(b *testing.B) {
					var ctr rpcCounter
					var h holders
					cycles := permitContenders(b, &ctr, &h, newPrefix("permits"), n, permits)
					runAdmissions(b, &ctr, &h, cycles)
				})
			}
		})
	}
}

// holders tracks the guards holding the key in-process: how many at once,
// and which permits, so that a permit held twice is caught.
type holders struct {
	now, peak atomic.Int64
	permit    [benchPermits]atomic.Bool
	twice     atomic.Int64 // acquisitions of a permit already held
}

func (h *holders) take(permit int) {
	if n := h.now.Add(1); n > h.peak.Load() {
		for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
		}
	}
	if permit < 0 || permit >= len(h.permit) || !h.permit[permit].CompareAndSwap(false, true) {
		h.twice.Add(1)
	}
}

func (h *holders) give(permit int) {
	if permit >= 0 && permit < len(h.permit) {
		h.permit[permit].Store(false)
	}
	h.now.Add(-1)
}

func permitContenders(b *testing.B, ctr *rpcCounter, h *holders, prefix string, n, permits int) []benchrun.Take {
	cycles := make([]benchrun.Take, n)
	for i, cli := range contenderClients(b, ctr, n) {
		c, _ := newAshlock(b, cli, prefix)
		lock := c.Lock("k")
		if permits > 1 {
			lock = lock.WithPermits(permits)
		}
		cycles[i] = func(ctx context.Context) (func(context.Context) error, error) {
			g, err := lock.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			p := g.Permit()
			h.take(p)
			// The critical section: a hold of this length.
			time.Sleep(permitHold)
			return func(ctx context.Context) error {
				h.give(p)
				return g.Unlock(ctx)
			}, nil
		}
	}
	return cycles
}

// runAdmissions is runTurns with the metrics of BenchmarkPermitHandoff:
// the contenders run until b.N admissions have been timed, after a warm-up
// of len(cycles) admissions that fills the queue.
func runAdmissions(b *testing.B, ctr *rpcCounter, h *holders, cycles []benchrun.Take) {
	err := runTurns(b, ctr, cycles, "permit handoff", func(before, after counts) {
		reportRPCs(b, before, after, b.N, "admission")
		d := after.sub(before)
		// Each keep-alive request gets one answer on its stream.
		b.ReportMetric(float64(d.streamRecv-d.keepAlives)/float64(b.N), "watch-msgs/release")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "admissions/s")
	})
	b.ReportMetric(float64(h.peak.Load()), "peak-holders")
	if err != nil {
		b.Fatal(err)
	}
	if t := h.twice.Load(); t > 0 {
		b.Fatalf("%d acquisitions were given a permit another guard held", t)
	}
}

// The permit bookkeeping of BenchmarkPermitHandoff.
func TestHolders(t *testing.T) {
	var h holders
	h.take(0)
	h.take(3)
	h.give(0)
	h.take(0)
	if h.peak.Load() != 2 || h.twice.Load() != 0 {
		t.Fatalf("peak %d twice %d, want 2 and 0", h.peak.Load(), h.twice.Load())
	}
	h.take(3)
	h.take(benchPermits)
	if h.twice.Load() != 2 || h.peak.Load() != 4 {
		t.Fatalf("peak %d twice %d, want 4 and 2", h.peak.Load(), h.twice.Load())
	}
}
