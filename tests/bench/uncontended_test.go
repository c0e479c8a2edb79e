package bench_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkUncontended is one client taking and releasing a free lock, over
// and over: ashlock's Acquire+Unlock, etcd's concurrency.Mutex Lock+Unlock
// on a reused Session, and the floor, two raw Puts (a lock needs at least a
// write to take it and one to give it back). Targets: ashlock at most 1.0x
// etcd-mutex and at most 1.15x raw-2puts.
//
// raw-2txns is the floor of ashlock's own protocol, sent by hand: a Txn
// that puts the claim if absent (with a lease) and reads the queue, and a
// Txn that deletes it only if its create revision is still the one it got
// (guarantee 7), with no client, lease pool, guard or watch around them.
// ashlock ÷ raw-2txns is what the library adds to its protocol.
func BenchmarkUncontended(b *testing.B) {
	b.Run("impl=ashlock", func(b *testing.B) {
		var ctr rpcCounter
		cli := newEtcd(b, &ctr)
		compact(b, cli)
		c, _ := newAshlock(b, cli, newPrefix("uncontended"))
		lock := c.Lock("k")
		ctx := runCtx(b)
		cycle := func() {
			g, err := lock.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		cycle() // grant the pooled lease and open the keep-alive stream
		before := ctr.snapshot()
		b.ReportAllocs()
		for b.Loop() {
			cycle()
		}
		reportRPCs(b, before, ctr.snapshot(), b.N, "op")
	})
	b.Run("impl=etcd-mutex", func(b *testing.B) {
		var ctr rpcCounter
		cli := newEtcd(b, &ctr)
		compact(b, cli)
		m := concurrency.NewMutex(newSession(b, cli, 0), newPrefix("uncontended")+"k")
		ctx := runCtx(b)
		before := ctr.snapshot()
		b.ReportAllocs()
		for b.Loop() {
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		reportRPCs(b, before, ctr.snapshot(), b.N, "op")
	})
	b.Run("impl=raw-2txns", func(b *testing.B) {
		var ctr rpcCounter
		cli := newEtcd(b, &ctr)
		compact(b, cli)
		prefix := newPrefix("uncontended")
		key := prefix + "k/claim"
		ctx := runCtx(b)
		lease, err := cli.Grant(ctx, 30)
		if err != nil {
			b.Fatal(err)
		}
		before := ctr.snapshot()
		b.ReportAllocs()
		for b.Loop() {
			take, err := cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpGet(prefix+"k/", clientv3.WithLastCreate()...),
					clientv3.OpPut(key, "held", clientv3.WithLease(lease.ID))).
				Commit()
			if err != nil || !take.Succeeded {
				b.Fatalf("take: succeeded=%v err=%v", take != nil && take.Succeeded, err)
			}
			give, err := cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", take.Header.Revision)).
				Then(clientv3.OpDelete(key)).
				Commit()
			if err != nil || !give.Succeeded {
				b.Fatalf("give back: succeeded=%v err=%v", give != nil && give.Succeeded, err)
			}
		}
		reportRPCs(b, before, ctr.snapshot(), b.N, "op")
	})
	b.Run("impl=raw-2puts", func(b *testing.B) {
		var ctr rpcCounter
		cli := newEtcd(b, &ctr)
		compact(b, cli)
		key := newPrefix("uncontended") + "k"
		ctx := runCtx(b)
		before := ctr.snapshot()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cli.Put(ctx, key, "held"); err != nil {
				b.Fatal(err)
			}
			if _, err := cli.Put(ctx, key, "free"); err != nil {
				b.Fatal(err)
			}
		}
		reportRPCs(b, before, ctr.snapshot(), b.N, "op")
	})
}
