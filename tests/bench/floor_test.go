package bench_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// rawClaimsCycle is the least etcd work that takes n free keys at once
// and gives them back, sent by hand: one Txn that creates a claim bound to
// a lease at each key if none is there (n compares, n puts, no reads), and
// one Txn that deletes the n claims. No lock can claim n keys atomically
// with less; BenchmarkKindsInterleaved sets it beside LockAll as the floor
// of what a claim on n keys costs over a claim on one.
func rawClaimsCycle(n int) cycleMaker {
	return func(b testing.TB) cycle {
		ctr := new(rpcCounter)
		cli := newEtcd(b, ctr)
		compact(b, cli)
		prefix := newPrefix(fmt.Sprintf("raw-claims-%d", n))
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("%sk%d/claim", prefix, i)
		}
		ctx, cancel := callCtx()
		defer cancel()
		lease, err := cli.Grant(ctx, 30)
		if err != nil {
			b.Fatal(err)
		}
		absent := make([]clientv3.Cmp, n)
		puts := make([]clientv3.Op, n)
		dels := make([]clientv3.Op, n)
		for i, k := range keys {
			absent[i] = clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
			puts[i] = clientv3.OpPut(k, "held", clientv3.WithLease(lease.ID))
			dels[i] = clientv3.OpDelete(k)
		}
		return cycle{ctr, func(ctx context.Context) error {
			take, err := cli.Txn(ctx).If(absent...).Then(puts...).Commit()
			switch {
			case err != nil:
				return err
			case !take.Succeeded:
				return errors.New("take: a claim exists already")
			}
			_, err = cli.Txn(ctx).Then(dels...).Commit()
			return err
		}}
	}
}
