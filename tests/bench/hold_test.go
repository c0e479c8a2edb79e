package bench_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// holdTTL is the lease TTL of the held locks, and holdInterval the renewal
// interval that goes with it (a third, ashlock's default and clientv3's
// keep-alive period). Short, so that a few intervals fit in a benchmark.
const (
	holdTTL      = 3 * time.Second
	holdInterval = holdTTL / 3
	// holdWindow is how long keep-alives are counted while the locks are
	// held.
	holdWindow = 3 * holdInterval
	// holdWorkers is how many goroutines take the locks, so that taking
	// 10,000 of them on etcd does not dominate the benchmark's time.
	holdWorkers = 16
)

// holdResult is what holding n locks cost one client.
type holdResult struct {
	heapPerLock       float64 // bytes of live heap per held lock
	goroutinesPerLock float64
	leases            int64   // leases the locks are bound to
	keepAlives        float64 // keep-alive requests per renewal interval
	acquiresPerSec    float64 // while taking the n locks
}

func (r holdResult) report(b *testing.B) {
	b.ReportMetric(r.heapPerLock, "heapB/lock")
	b.ReportMetric(r.goroutinesPerLock, "goroutines/lock")
	b.ReportMetric(float64(r.leases), "leases")
	b.ReportMetric(r.keepAlives, "keepalives/interval")
	b.ReportMetric(r.acquiresPerSec, "acquires/s")
}

// holder is one implementation under BenchmarkHold: it takes n locks on
// distinct keys (concurrently) and reports how many leases and keep-alive
// requests that costs.
type holder struct {
	lock       func(ctx context.Context, i int) (any, error) // takes lock i; the result is kept alive
	leases     func() int64                                  // leases granted to this holder and still alive
	keepAlives func() int64                                  // keep-alive requests sent so far
}

// BenchmarkHold holds many locks from one client and reports, per held
// lock, the live heap and goroutines it costs, how many leases back the
// locks and how many keep-alive requests per renewal interval keep them
// (which must not grow with the number of locks), and the rate at which
// the locks were taken (holdWorkers goroutines on one client). ns/op is
// the time of one whole cycle (take, count keep-alives for holdWindow,
// release) and is not a figure of merit.
//
// Heap and goroutines are the benchmark process's: the etcd member runs in
// a child process and is not counted.
func BenchmarkHold(b *testing.B) {
	for _, n := range []int{1, 10_000} {
		b.Run(fmt.Sprintf("backend=etcd/held=%d/impl=ashlock", n), func(b *testing.B) {
			benchHold(b, n, ashlockHolder)
		})
		b.Run(fmt.Sprintf("backend=etcd/held=%d/impl=etcd-mutex", n), func(b *testing.B) {
			benchHold(b, n, mutexHolder)
		})
	}
	for _, n := range []int{1, 100_000} {
		b.Run(fmt.Sprintf("backend=memory/held=%d/impl=ashlock", n), func(b *testing.B) {
			benchHold(b, n, memoryHolder)
		})
	}
}

func benchHold(b *testing.B, n int, setup func(*testing.B) holder) {
	var r holdResult
	for b.Loop() {
		r = holdOnce(b, n, setup)
	}
	r.report(b)
}

// holdOnce runs one cycle on fresh clients, which b.Cleanup closes.
func holdOnce(b *testing.B, n int, setup func(*testing.B) holder) holdResult {
	ctx := runCtx(b)
	h := setup(b)
	held := make([]any, n)

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()

	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, holdWorkers)
	for range min(holdWorkers, n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				v, err := h.lock(ctx, i)
				if err != nil {
					errs <- err
					return
				}
				held[i] = v
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}

	runtime.GC()
	runtime.ReadMemStats(&after)
	r := holdResult{
		heapPerLock:       (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n),
		goroutinesPerLock: float64(runtime.NumGoroutine()-g0) / float64(n),
		leases:            h.leases(),
		acquiresPerSec:    float64(n) / took.Seconds(),
	}

	// Count keep-alives over whole intervals. This wait measures; it
	// does not stand in for synchronisation.
	ka0 := h.keepAlives()
	timer := time.NewTimer(holdWindow)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
		b.Fatal(ctx.Err())
	}
	r.keepAlives = float64(h.keepAlives()-ka0) / float64(holdWindow/holdInterval)
	runtime.KeepAlive(held)
	return r
}

// newLeases returns a function that counts the leases the etcd member has
// granted since newLeases was called and that are still alive. Nothing
// else runs on the member meanwhile.
func newLeases(b *testing.B) func() int64 {
	op := newEtcd(b, nil)
	count := func() int64 {
		ctx, cancel := callCtx()
		defer cancel()
		resp, err := op.Leases(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return int64(len(resp.Leases))
	}
	base := count()
	return func() int64 { return count() - base }
}

func ashlockHolder(b *testing.B) holder {
	leases := newLeases(b)
	var ctr rpcCounter
	cli := newEtcd(b, &ctr)
	compact(b, cli)
	c, _ := newAshlock(b, cli, newPrefix("hold"))
	// The Mutex's Session, and so its lease, is made before the timed part;
	// give ashlock the same start: one lock taken and given back grants
	// the pooled lease of holdTTL (which the held locks then share) and
	// opens the Backend's watch stream.
	ctx := runCtx(b)
	g, err := c.Lock("warm-up").WithTTL(holdTTL).Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	return holder{
		lock: func(ctx context.Context, i int) (any, error) {
			return c.Lock(fmt.Sprint("k/", i)).WithTTL(holdTTL).Acquire(ctx)
		},
		leases:     leases,
		keepAlives: func() int64 { return ctr.keepAlives.Load() },
	}
}

func mutexHolder(b *testing.B) holder {
	leases := newLeases(b)
	var ctr rpcCounter
	cli := newEtcd(b, &ctr)
	compact(b, cli)
	s := newSession(b, cli, int(holdTTL/time.Second))
	prefix := newPrefix("hold")
	return holder{
		lock: func(ctx context.Context, i int) (any, error) {
			m := concurrency.NewMutex(s, fmt.Sprint(prefix, "k/", i))
			return m, m.Lock(ctx)
		},
		leases:     leases,
		keepAlives: func() int64 { return ctr.keepAlives.Load() },
	}
}

func memoryHolder(b *testing.B) holder {
	be := &countingBackend{Backend: memory.New()}
	b.Cleanup(func() { _ = be.Close() })
	c, err := ashlock.ConnectWith(context.Background(), ashlock.LockConfig{Logger: quiet}, be)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := callCtx()
		defer cancel()
		_ = c.Close(ctx)
	})
	return holder{
		lock: func(ctx context.Context, i int) (any, error) {
			return c.Lock(fmt.Sprint("k/", i)).WithTTL(holdTTL).Acquire(ctx)
		},
		leases:     func() int64 { return be.grants.Load() - be.revokes.Load() },
		keepAlives: func() int64 { return be.keepAlives.Load() },
	}
}

// countingBackend counts the lease calls the client makes on the memory
// backend. It stays a backend.Local: the embedded Backend's Local method
// is promoted, and the wrapper does no I/O.
type countingBackend struct {
	*memory.Backend
	grants, revokes, keepAlives atomic.Int64
}

var _ backend.Local = (*countingBackend)(nil)

func (c *countingBackend) Grant(ctx context.Context, ttl time.Duration) (backend.Lease, error) {
	l, err := c.Backend.Grant(ctx, ttl)
	if err == nil {
		c.grants.Add(1)
	}
	return l, err
}

func (c *countingBackend) Revoke(ctx context.Context, id backend.LeaseID) error {
	c.revokes.Add(1)
	return c.Backend.Revoke(ctx, id)
}

func (c *countingBackend) KeepAlive(ctx context.Context, id backend.LeaseID) (time.Duration, error) {
	c.keepAlives.Add(1)
	return c.Backend.KeepAlive(ctx, id)
}
