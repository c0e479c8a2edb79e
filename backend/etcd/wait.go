package etcd

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// waitDeleted blocks until key is deleted at a revision >= from: no
// polling, and only the waiters directly behind a claim wake when it goes.
// It is served by the Backend's loss watch when that watch can promise to
// deliver the delete (see predwait.go), and otherwise by one watch on key
// alone. Watching from a known revision means a delete that happened
// between the caller's read and the watch's start is not missed.
//
// It returns nil when the key was deleted, and also when it cannot tell and
// the caller must simply look again (the loss watch stopped, or the start
// revision was compacted): both callers re-read the queue with a Txn after
// it returns, so an early return costs a round trip, never exclusion. It
// returns the claim's loss (ErrLeaseExpired) as soon as the loss watch
// reports our own claim gone, ctx's end, ErrClosed, or ErrUnavailable if
// the watch failed.
func (a *acquisition) waitDeleted(ctx context.Context, key string, from int64) error {
	if ch, cancel, ok := a.b.reg.waitPred(key, from); ok {
		// cancel unregisters the wait on every way out: ctx's end, our
		// own claim's loss, Close, and (harmlessly) after the wake.
		defer cancel()
		select {
		case <-ch:
			return nil
		case <-a.e.lost:
			return a.lostError()
		case <-ctx.Done():
			return ctxError(ctx, "etcd acquire: waiting")
		case <-a.b.ctx.Done():
			return closedError("acquire")
		}
	}
	return a.watchDeleted(ctx, key, from)
}

// watchDeleted is waitDeleted on a watch of its own.
func (a *acquisition) watchDeleted(ctx context.Context, key string, from int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := a.b.cli.Watch(wctx, key, clientv3.WithRev(from), clientv3.WithFilterPut())
	for {
		select {
		case wr, ok := <-wch:
			switch {
			case !ok:
				if ctx.Err() != nil {
					return ctxError(ctx, "etcd acquire: waiting")
				}
				return fmt.Errorf("%w: etcd acquire: watch on %s closed", backend.ErrUnavailable, key)
			case wr.CompactRevision != 0:
				return nil // history is gone; the caller re-reads the queue
			case wr.Canceled:
				return rpcError(ctx, "acquire: watch", wr.Err())
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		case <-a.e.lost:
			return a.lostError()
		case <-ctx.Done():
			return ctxError(ctx, "etcd acquire: waiting")
		case <-a.b.ctx.Done():
			return closedError("acquire")
		}
	}
}
