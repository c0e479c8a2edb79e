package ashlock_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ash-lock/ashlock"
)

// Benchmarks on the in-process backend, each beside its sync.Mutex
// baseline in the same run. Compare with benchstat; see BENCHMARKS.md.

func benchClient(b *testing.B) *ashlock.LockClient {
	b.Helper()
	c, err := ashlock.Connect(context.Background(), ashlock.LockConfig{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func BenchmarkUncontended(b *testing.B) {
	b.Run("impl=ashlock-memory", func(b *testing.B) {
		c := benchClient(b)
		ctx := context.Background()
		lock := c.Lock("bench")
		b.ReportAllocs()
		for b.Loop() {
			g, err := lock.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=sync.Mutex", func(b *testing.B) {
		var mu sync.Mutex
		b.ReportAllocs()
		for b.Loop() {
			mu.Lock()
			//lint:ignore SA2001 an empty critical section is the baseline being measured
			mu.Unlock()
		}
	})
	// The floor: what any in-process lock must do that hands out a fresh
	// guard (callers keep it after Unlock, so it cannot be pooled) and
	// records when it was acquired - a mutex, one 176-byte allocation that
	// holds pointers, and one clock read - with no token, lease, queue or
	// bookkeeping. It allocates a floorGuard, not an ashlock.Guard, so that
	// the row means the same whatever size the Guard type has.
	b.Run("impl=floor", func(b *testing.B) {
		var mu sync.Mutex
		b.ReportAllocs()
		for b.Loop() {
			mu.Lock()
			floorSink, floorTime = new(floorGuard), time.Now()
			mu.Unlock()
		}
	})
	// The floor plus what release on drop costs any guard that has it: a
	// handle apart from the guard's state, a runtime.AddCleanup on the
	// handle when it is handed out and a Stop when it is unlocked.
	b.Run("impl=floor+cleanup", func(b *testing.B) {
		var mu sync.Mutex
		b.ReportAllocs()
		for b.Loop() {
			mu.Lock()
			s := new(floorGuard)
			h := &floorHandle{s: s}
			h.cleanup = runtime.AddCleanup(h, func(*floorGuard) {}, s)
			floorTime = time.Now()
			mu.Unlock()
			h.cleanup.Stop()
			floorHandleSink = h
		}
	})
}

// floorHandle is the floor+cleanup benchmark's stand-in for a Guard.
type floorHandle struct {
	s       *floorGuard
	cleanup runtime.Cleanup
}

// floorGuard is the floor benchmark's stand-in for a guard: 176 bytes of
// pointer words, which the collector scans as it does a guard's.
type floorGuard [176 / 8]*byte

// Sinks of the floor benchmark, so that the compiler keeps its work.
var (
	floorSink       *floorGuard
	floorTime       time.Time
	floorHandleSink *floorHandle
)

// BenchmarkHandoff8 has 8 goroutines take turns on one key; ns/op is the
// time per acquisition, so its inverse is handoffs per second.
func BenchmarkHandoff8(b *testing.B) {
	const workers = 8
	run := func(b *testing.B, lockUnlock func()) {
		b.ReportAllocs()
		var wg sync.WaitGroup
		per := b.N / workers
		b.ResetTimer()
		for w := range workers {
			n := per
			if w == 0 {
				n += b.N % workers
			}
			wg.Go(func() {
				for range n {
					lockUnlock()
				}
			})
		}
		wg.Wait()
	}
	b.Run("impl=ashlock-memory", func(b *testing.B) {
		c := benchClient(b)
		ctx := context.Background()
		lock := c.Lock("bench")
		run(b, func() {
			g, err := lock.Acquire(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			_ = g.Unlock(ctx)
		})
	})
	b.Run("impl=sync.Mutex", func(b *testing.B) {
		var mu sync.Mutex
		run(b, func() {
			mu.Lock()
			runtime.Gosched() // let others queue, as a remote holder would
			mu.Unlock()
		})
	})
}

// BenchmarkHold100k holds 100,000 guards on one client and reports the heap
// and goroutines each costs (including the backend's claim).
func BenchmarkHold100k(b *testing.B) {
	const n = 100_000
	for b.Loop() {
		c := benchClient(b)
		ctx := context.Background()
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprint("k/", i)
		}
		guards := make([]*ashlock.Guard, 0, n)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		for _, k := range keys {
			g, err := c.Lock(k).Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			guards = append(guards, g)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heapB/guard")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/n, "goroutines/guard")
		runtime.KeepAlive(guards)
		_ = c.Close(ctx)
	}
}
