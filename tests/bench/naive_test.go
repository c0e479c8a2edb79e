package bench_test

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// naiveLock is the textbook etcd lock that ashlock's queue improves on: put
// the lock key if it is absent (bound to a lease, with a unique value), and
// if someone else has it, watch the key until it is deleted and try again.
// Every waiter watches the same key, so each release wakes all of them and
// all of them race with a Txn: a thundering herd. It exists to be measured
// beside ashlock in BenchmarkHandoff; it gives no fairness and no fencing.
type naiveLock struct {
	cli   *clientv3.Client
	key   string
	id    string // this holder's value
	lease clientv3.LeaseID
}

// lock blocks until the key is ours or ctx ends.
func (l *naiveLock) lock(ctx context.Context) error {
	for {
		resp, err := l.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", 0)).
			Then(clientv3.OpPut(l.key, l.id, clientv3.WithLease(l.lease))).
			Commit()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return nil
		}
		if err := l.awaitDelete(ctx, resp.Header.Revision+1); err != nil {
			return err
		}
	}
}

// awaitDelete watches the key from revision from until it is deleted.
func (l *naiveLock) awaitDelete(ctx context.Context, from int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range l.cli.Watch(wctx, l.key, clientv3.WithRev(from), clientv3.WithFilterPut()) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("naive lock: watch on %s closed", l.key)
}

// unlock deletes the key if it still carries our value.
func (l *naiveLock) unlock(ctx context.Context) error {
	_, err := l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(l.key), "=", l.id)).
		Then(clientv3.OpDelete(l.key)).
		Commit()
	return err
}
