package bench_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ash-lock/ashlock"
)

// parallelClients is how many clients acquire at once in
// BenchmarkAcquireParallel.
const parallelClients = 64

// acquireFunc takes the lock on a fresh key named by seq and keeps it; the
// benchmark releases everything at the end by closing the client.
type acquireFunc func(ctx context.Context, seq int64) error

// BenchmarkAcquireParallel has 64 clients, each on its own etcd connection,
// take locks on distinct keys as fast as they can and keep them: ashlock's
// Acquire, etcd's concurrency.Mutex Lock (one Session per client), and the
// floor, one raw Put per lock. ns/op is wall time per acquisition across
// all clients; acquires/s is its inverse. The ratio ashlock/raw-put is the
// figure of merit.
func BenchmarkAcquireParallel(b *testing.B) {
	impls := []struct {
		name  string
		setup func(b *testing.B, ctr *rpcCounter, prefix string, worker int) acquireFunc
	}{
		{"ashlock", func(b *testing.B, ctr *rpcCounter, prefix string, _ int) acquireFunc {
			c, _ := newAshlock(b, newEtcd(b, ctr), prefix)
			// The guards are kept: a Guard that becomes unreachable is
			// released, and the benchmark holds what it takes.
			var held []*ashlock.Guard
			b.Cleanup(func() { runtime.KeepAlive(held) })
			return func(ctx context.Context, seq int64) error {
				g, err := c.Lock(fmt.Sprint("k/", seq)).Acquire(ctx)
				held = append(held, g)
				return err
			}
		}},
		{"etcd-mutex", func(b *testing.B, ctr *rpcCounter, prefix string, _ int) acquireFunc {
			s := newSession(b, newEtcd(b, ctr), 0)
			return func(ctx context.Context, seq int64) error {
				return concurrency.NewMutex(s, fmt.Sprint(prefix, "k/", seq)).Lock(ctx)
			}
		}},
		{"raw-put", func(b *testing.B, ctr *rpcCounter, prefix string, _ int) acquireFunc {
			cli := newEtcd(b, ctr)
			return func(ctx context.Context, seq int64) error {
				_, err := cli.Put(ctx, fmt.Sprint(prefix, "k/", seq), "held")
				return err
			}
		}},
	}
	b.Run(fmt.Sprintf("clients=%d", parallelClients), func(b *testing.B) {
		for _, impl := range impls {
			b.Run("impl="+impl.name, func(b *testing.B) {
				compact(b, newEtcd(b, nil))
				var ctr rpcCounter
				prefix := newPrefix("parallel")
				workers := make([]acquireFunc, parallelClients)
				for i := range workers {
					workers[i] = impl.setup(b, &ctr, prefix, i)
				}
				runParallel(b, &ctr, workers)
			})
		}
	})
}

// runParallel runs b.N acquisitions spread over the workers, each taking
// the next sequence number until b.N are done. Only those acquisitions are
// timed; releasing (closing the clients) happens in b.Cleanup.
func runParallel(b *testing.B, ctr *rpcCounter, workers []acquireFunc) {
	ctx := runCtx(b)
	errs := make(chan error, len(workers))
	// Warm up untimed: each client's first acquisition grants its lease
	// and opens its streams. Negative sequence numbers keep the keys apart.
	var wg sync.WaitGroup
	for i, acquire := range workers {
		wg.Go(func() {
			if err := acquire(ctx, -int64(i)-1); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}

	var next atomic.Int64
	before := ctr.snapshot()
	b.ReportAllocs()
	b.ResetTimer()
	for _, acquire := range workers {
		wg.Go(func() {
			for seq := next.Add(1); seq <= int64(b.N); seq = next.Add(1) {
				if err := acquire(ctx, seq); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	reportRPCs(b, before, ctr.snapshot(), b.N, "op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acquires/s")
}
