package bench_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

const (
	// contendWorkers goroutines, one client each, take random subsets of
	// contendKeys keys, contendMin to contendMax keys at a time.
	contendWorkers = 16
	contendKeys    = 6
	contendMin     = 2
	contendMax     = 4
	// stuckBound is how long one acquisition may take before it counts as
	// stuck. Waits under this contention are milliseconds; a deadlock
	// waits forever.
	stuckBound = 30 * time.Second
	// deadlockHold bounds the random hold of TestLockAllNoDeadlock's
	// critical sections: long enough that the in-process check of
	// exclusion sees overlapping holds, short enough to keep the keys
	// contended.
	deadlockHold = time.Millisecond
	// deadlockRunEnv sets how long TestLockAllNoDeadlock runs (a Go
	// duration); deadlockRunDefault is the run of a plain go test.
	deadlockRunEnv     = "ASHLOCK_DEADLOCK_RUN"
	deadlockRunDefault = 3 * time.Second
)

// multiLocker takes every key of keys (in the order given) and returns the
// function that gives them back.
type multiLocker func(ctx context.Context, keys []string) (release func(context.Context) error, err error)

// contention is what a run of contend saw.
type contention struct {
	acquired   int64           // acquisitions completed
	elapsed    time.Duration   // from the start to the last worker's end
	waits      []time.Duration // each completed acquisition's wait
	stuck      int64           // acquisitions that did not complete within stuckBound
	overlapped int64           // acquisitions that found one of their keys held in-process
}

// contend has one worker per locker take random subsets of contendKeys
// keys (contendMin to contendMax of them, in a random order) and give them
// back after a hold drawn uniformly from [0, hold) (none if hold is 0),
// until stop says so. Each acquisition is bounded by
// stuckBound: one that does not complete in time is counted as stuck and
// ends the run. The workers also check, in-process, that no key is held by
// two of them at once.
func contend(ctx context.Context, lockers []multiLocker, hold time.Duration, stop func(acquired int64) bool) (contention, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var held [contendKeys]atomic.Bool
	var acquired, stuck, overlapped atomic.Int64
	waits := make([][]time.Duration, len(lockers))
	errs := make(chan error, len(lockers))
	start := time.Now()
	var wg sync.WaitGroup
	for w, lock := range lockers {
		rng := rand.New(rand.NewPCG(rand.Uint64(), uint64(w)))
		wg.Go(func() {
			for ctx.Err() == nil && !stop(acquired.Load()) {
				idx := rng.Perm(contendKeys)[:contendMin+rng.IntN(contendMax-contendMin+1)]
				keys := make([]string, len(idx))
				for i, k := range idx {
					keys[i] = fmt.Sprint("k", k)
				}
				actx, acancel := context.WithTimeout(ctx, stuckBound)
				t0 := time.Now()
				release, err := lock(actx, keys)
				wait := time.Since(t0)
				acancel()
				switch {
				case err != nil && ctx.Err() != nil:
					return // the run is over
				case errors.Is(err, context.DeadlineExceeded):
					stuck.Add(1)
					errs <- fmt.Errorf("LockAll(%q) did not complete within %v", keys, stuckBound)
					cancel()
					return
				case err != nil:
					errs <- fmt.Errorf("LockAll(%q): %w", keys, err)
					cancel()
					return
				}
				for _, k := range idx {
					if !held[k].CompareAndSwap(false, true) {
						overlapped.Add(1)
					}
				}
				waits[w] = append(waits[w], wait)
				acquired.Add(1)
				if hold > 0 {
					// The critical section: a hold of this length.
					time.Sleep(time.Duration(rng.Int64N(int64(hold))))
				}
				for _, k := range idx {
					held[k].Store(false)
				}
				if err := release(context.WithoutCancel(ctx)); err != nil {
					errs <- fmt.Errorf("release of %q: %w", keys, err)
					cancel()
					return
				}
			}
		})
	}
	// A worker whose acquisition ignores its context would never return:
	// give them stuckBound beyond the end of the run.
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	var err error
	select {
	case <-finished:
	case <-ctx.Done():
		select {
		case <-finished:
		case <-time.After(stuckBound):
			err = fmt.Errorf("workers still blocked %v after the run ended", stuckBound)
		}
	}
	c := contention{
		acquired:   acquired.Load(),
		elapsed:    time.Since(start),
		waits:      slices.Concat(waits...),
		stuck:      stuck.Load(),
		overlapped: overlapped.Load(),
	}
	select {
	case e := <-errs:
		err = errors.Join(err, e)
	default:
	}
	if c.overlapped > 0 {
		err = errors.Join(err, fmt.Errorf("%d acquisitions found a key they were given held by another worker", c.overlapped))
	}
	return c, err
}

// ashlockLockers makes n ashlock clients under prefix, each on its own
// etcd client counted by ctr, taking keys with LockAll.
func ashlockLockers(b testing.TB, ctr *rpcCounter, prefix string, n int) []multiLocker {
	lockers := make([]multiLocker, n)
	for i := range lockers {
		c, _ := newAshlock(b, newEtcd(b, ctr), prefix)
		lockers[i] = func(ctx context.Context, keys []string) (func(context.Context) error, error) {
			g, err := c.LockAll(keys...).Acquire(ctx)
			if err != nil {
				return nil, err
			}
			return g.Unlock, nil
		}
	}
	return lockers
}

// sortedMutexLockers makes n etcd concurrency.Mutex users under prefix,
// each with a Session on its own etcd client counted by ctr, taking keys
// one Mutex at a time in sorted order (the classic way to avoid deadlock)
// and releasing them in reverse.
func sortedMutexLockers(b testing.TB, ctr *rpcCounter, prefix string, n int) []multiLocker {
	lockers := make([]multiLocker, n)
	for i := range lockers {
		s := newSession(b, newEtcd(b, ctr), 0)
		lockers[i] = func(ctx context.Context, keys []string) (func(context.Context) error, error) {
			keys = slices.Sorted(slices.Values(keys))
			ms := make([]*concurrency.Mutex, 0, len(keys))
			release := func(ctx context.Context) error {
				var err error
				for _, m := range slices.Backward(ms) {
					err = errors.Join(err, m.Unlock(ctx))
				}
				return err
			}
			for _, k := range keys {
				m := concurrency.NewMutex(s, prefix+k)
				if err := m.Lock(ctx); err != nil {
					return nil, errors.Join(err, release(context.WithoutCancel(ctx)))
				}
				ms = append(ms, m)
			}
			return release, nil
		}
	}
	return lockers
}

// BenchmarkLockAllContended has 16 clients take random subsets of 2 to 4
// of 6 overlapping keys, listed in random orders, as fast as they can,
// with an empty critical section: ashlock's LockAll, against the classic
// way with etcd's concurrency.Mutex, one Mutex per key taken in sorted
// order (one Session per client). ns/op is wall time per completed
// acquisition across all clients. Metrics: "acquisitions/s", the wait of
// an acquisition ("wait-p50-ms", "wait-p99-ms", "wait-max-ms") and
// "rpcs/acquisition". An acquisition that does not complete within
// stuckBound (a deadlock) fails the benchmark, as does a key found held by
// two clients at once.
func BenchmarkLockAllContended(b *testing.B) {
	impls := []struct {
		name string
		mk   func(b testing.TB, ctr *rpcCounter, prefix string, n int) []multiLocker
	}{
		{"ashlock", ashlockLockers},
		{"etcd-mutex-sorted", sortedMutexLockers},
	}
	for _, impl := range impls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			compact(b, newEtcd(b, nil))
			var ctr rpcCounter
			lockers := impl.mk(b, &ctr, newPrefix("lockall"), contendWorkers)
			ctx := runCtx(b)
			// Warm up untimed: a few acquisitions per client grant the
			// leases and open the streams.
			if _, err := contend(ctx, lockers, 0, func(n int64) bool { return n >= 4*contendWorkers }); err != nil {
				b.Fatal(err)
			}
			before := ctr.snapshot()
			b.ResetTimer()
			c, err := contend(ctx, lockers, 0, func(n int64) bool { return n >= int64(b.N) })
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			// The last round of each worker may overshoot b.N by one.
			reportRPCs(b, before, ctr.snapshot(), int(c.acquired), "acquisition")
			b.ReportMetric(float64(c.acquired)/c.elapsed.Seconds(), "acquisitions/s")
			benchrun.ReportLatencies(b, "wait-", c.waits)
		})
	}
}

// TestLockAllNoDeadlock runs the workload of BenchmarkLockAllContended
// with ashlock's LockAll for a fixed time, each hold lasting a random
// 0 to 1 ms, and fails if any acquisition
// does not complete within stuckBound (or a key is held by two clients at
// once). It runs for 3 s (plus etcd's start) in a plain go test, and for
// as long as ASHLOCK_DEADLOCK_RUN says otherwise:
//
//	cd tests && ASHLOCK_DEADLOCK_RUN=60s go test -run TestLockAllNoDeadlock -v ./bench/
func TestLockAllNoDeadlock(t *testing.T) {
	run := deadlockRunDefault
	if v := os.Getenv(deadlockRunEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive Go duration", deadlockRunEnv, v)
		}
		run = d
	}
	compact(t, newEtcd(t, nil))
	var ctr rpcCounter
	lockers := ashlockLockers(t, &ctr, newPrefix("deadlock"), contendWorkers)
	ctx, cancel := context.WithTimeout(context.Background(), run+3*stuckBound)
	defer cancel()
	end := time.Now().Add(run)
	c, err := contend(ctx, lockers, deadlockHold, func(int64) bool { return time.Now().After(end) })
	t.Logf("%d workers, subsets of %d-%d of %d keys, holds of 0-%v, %v: %d acquisitions (%.0f/s), wait p50 %.2f ms, p99 %.2f ms, max %.2f ms; stuck %d; %.2f requests per acquisition",
		contendWorkers, contendMin, contendMax, contendKeys, deadlockHold, c.elapsed.Round(time.Millisecond), c.acquired,
		float64(c.acquired)/c.elapsed.Seconds(), benchrun.Millis(benchrun.Percentile(c.waits, 0.5)), benchrun.Millis(benchrun.Percentile(c.waits, 0.99)),
		benchrun.Millis(benchrun.Percentile(c.waits, 1)), c.stuck, float64(ctr.snapshot().requests())/float64(max(c.acquired, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c.acquired == 0 {
		t.Fatal("no acquisition completed")
	}
}
