package bench_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// lockAllKeys is how many keys the LockAll cycle of
// BenchmarkKindsInterleaved takes at once.
const lockAllKeys = 8

// BenchmarkKindsInterleaved measures the uncontended cycle (take a free
// lock, give it back) of each kind of lock against the plain exclusive
// one, in turns as BenchmarkUncontendedInterleaved does (see
// benchrun.Interleave):
//
//   - exclusive: Lock(k).Acquire + Unlock, the cycle of table 1;
//   - exclusive-twin: the same on a second client of its own, the control
//     (exclusive/exclusive-twin must come out at 1.0);
//   - shared: Lock(k).Shared().Acquire + Unlock. Target: at most 1.1x
//     exclusive;
//   - lockall-8: LockAll of 8 keys, Acquire + Unlock. Target: at most 1.3x
//     exclusive;
//   - lockall-2: LockAll of 2 keys, to show how the cost grows with the
//     number of keys;
//   - etcd-mutex: etcd's concurrency.Mutex Lock + Unlock on a reused
//     Session, the peer of table 1;
//   - recipe-rlock: RLock + RUnlock of etcd's
//     client/v3/experimental/recipes RWMutex on a reused Session, the peer
//     of the shared cycle;
//   - raw-claims-8 and raw-claims-1: the least etcd work for taking n free
//     keys at once and giving them back (floor_test.go); their ratio is
//     the floor under lockall-8/exclusive.
//
// Metrics: "<impl>-ns/cycle" and "<impl>-rpcs/cycle" (requests sent per
// cycle, lease keep-alives excepted), and the ratios "shared/exclusive",
// "lockall-8/exclusive", "lockall-2/exclusive", "exclusive/exclusive-twin",
// "exclusive/etcd-mutex", "shared/recipe-rlock" and
// "raw-claims-8/raw-claims-1". ns/op is the time of
// one round of turns and means nothing by itself.
//
// Each ashlock cycle checks once, before the measurement, that the lock is
// of the kind it says: two shared guards hold the key together, and a
// LockAll guard holds all its keys. A backend without these kinds fails
// the benchmark instead of measuring exclusive locks under other names.
func BenchmarkKindsInterleaved(b *testing.B) {
	impls := []benchrun.Impl[cycle]{
		{Name: "exclusive", Make: ashlockCycle()},
		{Name: "exclusive-twin", Make: ashlockCycle()},
		{Name: "shared", Make: sharedCycle},
		{Name: "lockall-8", Make: lockAllCycle(lockAllKeys)},
		{Name: "lockall-2", Make: lockAllCycle(2)},
		{Name: "etcd-mutex", Make: mutexCycle},
		{Name: "recipe-rlock", Make: recipeRLockCycle},
		{Name: "raw-claims-8", Make: rawClaimsCycle(lockAllKeys)},
		{Name: "raw-claims-1", Make: rawClaimsCycle(1)},
	}
	ns := benchrun.Interleave(runCtx(b), b, impls)
	ratio := func(x, y int) { b.ReportMetric(ns[x]/ns[y], impls[x].Name+"/"+impls[y].Name) }
	ratio(2, 0) // shared/exclusive
	ratio(3, 0) // lockall-8/exclusive
	ratio(4, 0) // lockall-2/exclusive
	ratio(0, 1) // the control
	ratio(0, 5) // exclusive/etcd-mutex
	ratio(2, 6) // shared/recipe-rlock
	ratio(7, 8) // the floor of lockall-8/exclusive: raw-claims-8/raw-claims-1
}

// sharedCycle takes and gives back a free shared lock.
func sharedCycle(b testing.TB) cycle {
	ctr := new(rpcCounter)
	cli := newEtcd(b, ctr)
	compact(b, cli)
	c, _ := newAshlock(b, cli, newPrefix("shared"))
	lock := c.Lock("k").Shared()
	checkShared(b, lock)
	return cycle{ctr, func(ctx context.Context) error {
		g, err := lock.Acquire(ctx)
		if err != nil {
			return err
		}
		return g.Unlock(ctx)
	}}
}

// lockAllCycle takes and gives back n free keys with one LockAll.
func lockAllCycle(n int) cycleMaker {
	return func(b testing.TB) cycle {
		ctr := new(rpcCounter)
		cli := newEtcd(b, ctr)
		compact(b, cli)
		c, _ := newAshlock(b, cli, newPrefix("lockall"))
		lock := c.LockAll(keyNames(n)...)
		checkLockAll(b, c, lock, n)
		return cycle{ctr, func(ctx context.Context) error {
			g, err := lock.Acquire(ctx)
			if err != nil {
				return err
			}
			return g.Unlock(ctx)
		}}
	}
}

// recipeRLockCycle takes and gives back a free read lock of etcd's recipe
// RWMutex. RLock and RUnlock take no context (the recipe uses
// context.TODO); the cycle's ctx is not used.
func recipeRLockCycle(b testing.TB) cycle {
	ctr := new(rpcCounter)
	cli := newEtcd(b, ctr)
	compact(b, cli)
	m := recipe.NewRWMutex(newSession(b, cli, 0), newPrefix("recipe")+"k")
	return cycle{ctr, func(context.Context) error {
		if err := m.RLock(); err != nil {
			return err
		}
		return m.RUnlock()
	}}
}

// keyNames returns n key names, k0 to k<n-1>.
func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	return keys
}

// checkShared fails b unless two guards of lock hold its key together.
func checkShared(b testing.TB, lock *ashlock.LockBuilder) {
	b.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	g1, err := lock.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	g2, err := lock.TryAcquire(ctx)
	switch {
	case err != nil:
		b.Fatalf("kind check: a second shared guard while one is held: %v (shared locks not supported by the backend?)", err)
	case !g1.Shared() || !g2.Shared():
		b.Fatalf("kind check: shared guards report Shared() = %v, %v", g1.Shared(), g2.Shared())
	}
	for _, g := range []*ashlock.Guard{g1, g2} {
		if err := g.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// checkLockAll fails b unless a guard of lock (a LockAll of n keys of c)
// holds all n keys: a plain Lock of each is refused meanwhile.
func checkLockAll(b testing.TB, c *ashlock.LockClient, lock *ashlock.LockBuilder, n int) {
	b.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	g, err := lock.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if keys := g.Keys(); len(keys) != n {
		b.Fatalf("kind check: a LockAll guard of %d keys has Keys() = %q", n, keys)
	}
	for _, k := range keyNames(n) {
		other, err := c.Lock(k).TryAcquire(ctx)
		if !errors.Is(err, ashlock.ErrLocked) {
			if err == nil {
				_ = other.Unlock(ctx)
			}
			b.Fatalf("kind check: TryAcquire of %s under a LockAll guard: %v, want ErrLocked (LockAll not supported by the backend?)", k, err)
		}
	}
	if err := g.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
}
