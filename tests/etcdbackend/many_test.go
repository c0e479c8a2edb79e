package etcdbackend_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// Holding many locks costs no goroutine per lock, and one revoke of their
// shared lease still reaches every holder through the one loss watch.
func TestHoldingManyLocksIsCheap(t *testing.T) {
	const n = 300
	b, _ := newBackend(t, shared, uniquePrefix(t))
	l := grant(t, b, 60*time.Second)
	warm := acquire(t, b, request("warm-up", l, "w")) // starts the backend's own goroutines
	if err := b.Release(testCtx(t, waitBound), warm); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	signals := make([]*lostSignal, n)
	for i := range n {
		signals[i] = newLostSignal()
		r := request(fmt.Sprintf("many/%d", i), l, "holder")
		r.OnLost = backend.LossFunc(signals[i].onLost)
		acquire(t, b, r)
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
		slowest = max(slowest, s.await(t, lossBound, at))
	}
	t.Logf("all %d holders told of the revoke within %v", n, slowest)
}
