package etcdbackend_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// Holding many locks costs no goroutine per lock, although each held claim
// is watched on its own; and one revoke of their shared lease reaches every
// holder through those watches.
func TestHoldingManyLocksIsCheap(t *testing.T) {
	const (
		n       = 10000
		workers = 8
	)
	b, _ := newBackend(t, shared, uniquePrefix(t))
	l := grant(t, b, 60*time.Second)
	warm := acquire(t, b, request("warm-up", l, "w")) // starts the backend's own goroutines
	if err := b.Release(testCtx(t, waitBound), warm); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	signals := make([]*lostSignal, n)
	for i := range signals {
		signals[i] = newLostSignal()
	}
	ctx := testCtx(t, 5*time.Minute)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				r := request(fmt.Sprintf("many/%d", i), l, "holder")
				r.OnLost = backend.LossFunc(signals[i].onLost)
				if _, err := b.Acquire(ctx, r); err != nil {
					errs <- fmt.Errorf("acquire %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if grew := runtime.NumGoroutine() - before; grew > 20 {
		t.Errorf("holding %d locks added %d goroutines", n, grew)
	}
	at := time.Now()
	if err := b.Revoke(testCtx(t, waitBound), l.ID); err != nil {
		t.Fatal(err)
	}
	var slowest time.Duration
	for _, s := range signals {
		slowest = max(slowest, s.await(t, waitBound, at))
	}
	t.Logf("all %d holders told of the revoke within %v", n, slowest)
}
