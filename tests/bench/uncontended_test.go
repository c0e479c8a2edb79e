package bench_test

import (
	"context"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ash-lock/ashlock/backend/etcd"
)

// BenchmarkUncontended is one client taking and releasing a free lock, over
// and over: ashlock's Acquire+Unlock, etcd's concurrency.Mutex Lock+Unlock
// on a reused Session, and the floor, two raw Puts (a lock needs at least a
// write to take it and one to give it back). Targets: ashlock at most 1.0x
// etcd-mutex and at most 1.15x raw-2puts.
//
// raw-txn+delete is the floor of ashlock's own protocol, sent by hand: a
// Txn that puts the claim if absent (with a lease) and reads the queue,
// and a plain Delete of the claim, which is how ashlock releases a claim it
// still has as held (its name is lent to that claim alone), with no
// client, lease pool, guard or watch around them. ashlock ÷ raw-txn+delete
// is what the library adds to its protocol. raw-2txns releases with a Txn
// that deletes the claim only if its create revision is still the one it
// got, as ashlock does for a retried or late release (guarantee 7):
// raw-2txns ÷ raw-txn+delete is what that explicit comparison costs.
//
// The implementations run in an order that starts at a random place (see
// runInTurn); `make bench` runs this benchmark in 20 processes, one sample
// of each implementation per process, so that the samples of all of them
// are spread over the same stretch of time. BenchmarkUncontendedInterleaved
// compares the same cycles more closely, in alternating short runs.
func BenchmarkUncontended(b *testing.B) {
	runInTurn(b, []implBench{
		{"ashlock", loopCycle(ashlockCycle())},
		{"etcd-mutex", loopCycle(mutexCycle)},
		{"raw-2txns", loopCycle(rawCycle(releaseIfSame))},
		{"raw-txn+delete", loopCycle(rawCycle(releasePlain))},
		{"raw-2puts", loopCycle(rawPutsCycle)},
	})
}

// cycle is one implementation's take and give-back of a free lock, on an
// etcd client of its own whose requests ctr counts.
type cycle struct {
	ctr *rpcCounter
	run func(context.Context) error
}

func (c cycle) Run(ctx context.Context) error { return c.run(ctx) }

// Count reports the requests sent, lease keep-alives excepted, as
// "<impl>-rpcs/cycle".
func (c cycle) Count() func(b *testing.B, prefix string, n float64) {
	before := c.ctr.snapshot()
	return func(b *testing.B, prefix string, n float64) {
		b.ReportMetric(float64(c.ctr.snapshot().sub(before).requests())/n, prefix+"rpcs/cycle")
	}
}

// cycleMaker sets up a cycle on a fresh client and prefix; what it makes
// is closed in b.Cleanup.
type cycleMaker func(testing.TB) cycle

// loopCycle benchmarks mk's cycle alone, after one cycle of warm-up (for
// ashlock: the pooled lease is granted and its keep-alive stream opened).
func loopCycle(mk cycleMaker) func(*testing.B) {
	return func(b *testing.B) {
		c := mk(b)
		ctx := runCtx(b)
		if err := c.run(ctx); err != nil {
			b.Fatal(err)
		}
		before := c.ctr.snapshot()
		b.ReportAllocs()
		for b.Loop() {
			if err := c.run(ctx); err != nil {
				b.Fatal(err)
			}
		}
		reportRPCs(b, before, c.ctr.snapshot(), b.N, "op")
	}
}

func ashlockCycle(opts ...etcd.Option) cycleMaker {
	return func(b testing.TB) cycle {
		ctr := new(rpcCounter)
		cli := newEtcd(b, ctr)
		compact(b, cli)
		c, _ := newAshlock(b, cli, newPrefix("uncontended"), opts...)
		lock := c.Lock("k")
		return cycle{ctr, func(ctx context.Context) error {
			g, err := lock.Acquire(ctx)
			if err != nil {
				return err
			}
			return g.Unlock(ctx)
		}}
	}
}

func mutexCycle(b testing.TB) cycle {
	ctr := new(rpcCounter)
	cli := newEtcd(b, ctr)
	compact(b, cli)
	m := concurrency.NewMutex(newSession(b, cli, 0), newPrefix("uncontended")+"k")
	return cycle{ctr, func(ctx context.Context) error {
		if err := m.Lock(ctx); err != nil {
			return err
		}
		return m.Unlock(ctx)
	}}
}

func rawPutsCycle(b testing.TB) cycle {
	ctr := new(rpcCounter)
	cli := newEtcd(b, ctr)
	compact(b, cli)
	key := newPrefix("uncontended") + "k"
	return cycle{ctr, func(ctx context.Context) error {
		if _, err := cli.Put(ctx, key, "held"); err != nil {
			return err
		}
		_, err := cli.Put(ctx, key, "free")
		return err
	}}
}

// rawCycle is the cycle of a lock sent by hand: the take is ashlock's own
// enqueue Txn (put the claim if absent, with a lease, and read the newest
// claim of the queue), the give-back is release.
func rawCycle(release func(ctx context.Context, cli *clientv3.Client, key string, rev int64) error) cycleMaker {
	return func(b testing.TB) cycle {
		ctr := new(rpcCounter)
		cli := newEtcd(b, ctr)
		compact(b, cli)
		prefix := newPrefix("uncontended")
		key := prefix + "k/claim"
		ctx, cancel := callCtx()
		defer cancel()
		lease, err := cli.Grant(ctx, 30)
		if err != nil {
			b.Fatal(err)
		}
		return cycle{ctr, func(ctx context.Context) error {
			take, err := cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpGet(prefix+"k/", clientv3.WithLastCreate()...),
					clientv3.OpPut(key, "held", clientv3.WithLease(lease.ID))).
				Commit()
			switch {
			case err != nil:
				return err
			case !take.Succeeded:
				return errors.New("take: the claim exists already")
			}
			return release(ctx, cli, key, take.Header.Revision)
		}}
	}
}

// releaseIfSame deletes key only if its create revision is still rev:
// ashlock's release of a claim it cannot vouch for (guarantee 7).
func releaseIfSame(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err == nil && !resp.Succeeded {
		err = errors.New("the claim was not the one taken")
	}
	return err
}

// releasePlain deletes key whatever is there, as the Mutex's Unlock does
// and as ashlock's release of a claim it still has as held does.
func releasePlain(ctx context.Context, cli *clientv3.Client, key string, _ int64) error {
	_, err := cli.Delete(ctx, key)
	return err
}
