package bench_test

import (
	"errors"
	"runtime"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ash-lock/ashlock"
)

// BenchmarkTryAcquireHeld is a client trying, and failing, to take a key
// another client holds: ashlock's TryAcquire (ErrLocked), etcd's
// concurrency.Mutex TryLock (ErrLocked), and the floor, one Txn that would
// create the key if it were absent. Target: one round trip (rpcs/op = 1)
// and nothing left behind: "leftover-keys" is how many keys beyond the
// holder's own remain under the benchmark's prefix afterwards.
func BenchmarkTryAcquireHeld(b *testing.B) {
	b.Run("impl=ashlock", func(b *testing.B) {
		prefix := newPrefix("try")
		holderCli := newEtcd(b, nil)
		compact(b, holderCli)
		holder, _ := newAshlock(b, holderCli, prefix)
		ctx := runCtx(b)
		held, err := holder.Lock("k").Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		// Kept reachable: a dropped Guard is released, and the key must
		// stay held throughout.
		b.Cleanup(func() { runtime.KeepAlive(held) })
		var ctr rpcCounter
		c, _ := newAshlock(b, newEtcd(b, &ctr), prefix)
		lock := c.Lock("k")
		try := func() {
			if _, err := lock.TryAcquire(ctx); !errors.Is(err, ashlock.ErrLocked) {
				b.Fatalf("TryAcquire of a held key: %v, want ErrLocked", err)
			}
		}
		try() // grant the pooled lease outside the measurement
		before := ctr.snapshot()
		b.ReportAllocs()
		for b.Loop() {
			try()
		}
		reportRPCs(b, before, ctr.snapshot(), b.N, "op")
		b.ReportMetric(float64(keysUnder(b, holderCli, prefix)-1), "leftover-keys")
	})
	b.Run("impl=etcd-mutex", func(b *testing.B) {
		prefix := newPrefix("try")
		holderCli := newEtcd(b, nil)
		compact(b, holderCli)
		ctx := runCtx(b)
		if err := concurrency.NewMutex(newSession(b, holderCli, 0), prefix+"k").Lock(ctx); err != nil {
			b.Fatal(err)
		}
		var ctr rpcCounter
		m := concurrency.NewMutex(newSession(b, newEtcd(b, &ctr), 0), prefix+"k")
		before := ctr.snapshot()
		b.ReportAllocs()
		for b.Loop() {
			if err := m.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
				b.Fatalf("TryLock of a held key: %v, want ErrLocked", err)
			}
		}
		reportRPCs(b, before, ctr.snapshot(), b.N, "op")
		b.ReportMetric(float64(keysUnder(b, holderCli, prefix)-1), "leftover-keys")
	})
	b.Run("impl=raw-txn", func(b *testing.B) {
		prefix := newPrefix("try")
		key := prefix + "k"
		var ctr rpcCounter
		cli := newEtcd(b, &ctr)
		compact(b, cli)
		ctx := runCtx(b)
		if _, err := cli.Put(ctx, key, "held"); err != nil {
			b.Fatal(err)
		}
		before := ctr.snapshot()
		b.ReportAllocs()
		for b.Loop() {
			resp, err := cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, "mine")).
				Commit()
			if err != nil || resp.Succeeded {
				b.Fatalf("put-if-absent on a held key: succeeded=%v err=%v", resp != nil && resp.Succeeded, err)
			}
		}
		reportRPCs(b, before, ctr.snapshot(), b.N, "op")
		b.ReportMetric(float64(keysUnder(b, cli, prefix)-1), "leftover-keys")
	})
}
