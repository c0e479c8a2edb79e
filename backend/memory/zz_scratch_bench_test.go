package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

func BenchmarkStoreCycle(b *testing.B) {
	be := memory.New()
	defer be.Close()
	ctx := context.Background()
	l, _ := be.Grant(ctx, time.Hour)
	req := backend.AcquireRequest{Key: "bench", Lease: l.ID, Owner: "o", Wait: true, Fair: true}
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
