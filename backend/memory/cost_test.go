package memory_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// Holding many claims must cost little memory and no goroutines.
func TestHoldingManyClaimsIsCheap(t *testing.T) {
	const n = 100_000
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	reqs := make([]backend.AcquireRequest, n) // built before measuring
	for i := range reqs {
		reqs[i] = backend.AcquireRequest{
			Key: fmt.Sprintf("resource/%d", i), ID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i),
			Lease: l.ID, Owner: "host:1234", Wait: true, Fair: true,
		}
	}
	claims := make([]backend.Claim, n)
	goroutines := runtime.NumGoroutine()
	before := heapInUse()

	for i, r := range reqs {
		claims[i] = mustAcquire(t, b, r)
	}
	after := heapInUse()
	perClaim := (int64(after) - int64(before)) / n
	t.Logf("%d claims held: %d bytes of heap each, %d goroutines",
		n, perClaim, runtime.NumGoroutine())
	if perClaim >= 1024 {
		t.Errorf("holding a claim costs %d bytes of heap, want well under 1 KiB", perClaim)
	}
	if g := runtime.NumGoroutine(); g > goroutines {
		t.Errorf("goroutines grew from %d to %d while holding claims", goroutines, g)
	}

	if err := b.Revoke(t.Context(), l.ID); err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, b, reqs[n-1].Key); info.Held {
		t.Errorf("claim survived the revoke of its lease: %+v", info)
	}
	runtime.KeepAlive(claims)
	runtime.KeepAlive(reqs)
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
