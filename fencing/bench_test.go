package fencing_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ash-lock/ashlock/fencing"
)

// BenchmarkAdmit measures Admit from all Ps at once in the cases a busy
// resource server sees.
func BenchmarkAdmit(b *testing.B) {
	b.Run("holder/one-resource", func(b *testing.B) {
		// The current holder's many requests: same token, same resource.
		var f fencing.Fence
		benchParallel(b, func(_ int, _ uint64) error { return f.Admit("hot", 42) })
	})
	b.Run("raise/resource-per-goroutine", func(b *testing.B) {
		// Each goroutine a different resource, a new holder every call.
		var f fencing.Fence
		var ids atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			name := "res/" + strconv.FormatInt(ids.Add(1), 10)
			var token uint64
			for pb.Next() {
				token++
				if err := f.Admit(name, token); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("raise/10k-resources", func(b *testing.B) {
		// Requests spread over many resources, most already known.
		var f fencing.Fence
		names := resourceNames(10_000)
		benchParallel(b, func(i int, token uint64) error {
			_ = f.Admit(names[i%len(names)], token) // concurrent raises race; refusals are fine here
			return nil
		})
	})
	b.Run("shared/readers-one-resource", func(b *testing.B) {
		// Readers of one shared lock, each with a token of its own.
		var f fencing.Fence
		benchParallel(b, func(i int, _ uint64) error { return f.AdmitShared("hot", uint64(1000+i%64)) })
	})
	b.Run("stale", func(b *testing.B) {
		// Every request refused: the cost of turning a stale holder away.
		var f fencing.Fence
		if err := f.Admit("hot", 1<<40); err != nil {
			b.Fatal(err)
		}
		benchParallel(b, func(_ int, token uint64) error {
			if f.Admit("hot", token) == nil {
				b.Error("stale token admitted")
			}
			return nil
		})
	})
}

// benchParallel runs op under b.RunParallel with a per-goroutine counter i
// (offset per goroutine) and an increasing token.
func benchParallel(b *testing.B, op func(i int, token uint64) error) {
	b.Helper()
	var ids atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(ids.Add(1)) * 7919
		var token uint64
		for pb.Next() {
			i++
			token++
			if err := op(i, token); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func resourceNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "orders/" + strconv.Itoa(i)
	}
	return names
}
