package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// BenchmarkStoreCycle is the store's share of the root package's
// BenchmarkUncontended: one Acquire and Release of a free key on a pooled
// lease, with no ID (the client sends none to a backend.ClaimNamer) and no
// client around it.
func BenchmarkStoreCycle(b *testing.B) {
	be := memory.New()
	defer be.Close()
	ctx := context.Background()
	l, err := be.Grant(ctx, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	req := backend.AcquireRequest{Key: "bench", Lease: l.ID, Owner: "bench", Wait: true, Fair: true}
	b.ReportAllocs()
	for b.Loop() {
		c, err := be.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if err := be.Release(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}
