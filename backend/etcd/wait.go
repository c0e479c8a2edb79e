package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// waitDeleted blocks until the incarnation of key that existed at revision
// from-1 is gone: no polling, and only the waiters directly behind a claim
// wake when it goes. It watches key alone, on the Backend's shared watch
// stream (see predwait.go for how the watch starts without a gap).
//
// It returns nil when the claim is gone. A nil return is only a hint:
// both callers re-read the queue with a Txn after it, so an early return
// costs a round trip, never exclusion. It returns the loss of our own
// claim (ErrLeaseExpired) as soon as its watch reports it, ctx's end,
// ErrClosed, or ErrUnavailable if etcd refused the watch or the check
// of its gap failed. A stream that breaks meanwhile is reopened by the
// mux and the wait goes on.
func (a *acquisition) waitDeleted(ctx context.Context, key string, from int64) error {
	m := a.b.reg.mux
	p := newPredWait()
	w := &keyWatch{key: key, from: from, now: predStartNow, target: p}
	m.start(w)
	// Cancels the watch on every way out; after a delete it is a no-op.
	defer m.stop(w)
	for {
		select {
		case <-p.done:
			if p.err != nil {
				return fmt.Errorf("etcd acquire: %w", p.err)
			}
			return nil
		case <-p.created:
			covered := p.coveredFrom()
			if covered <= from {
				continue // no gap
			}
			rev, gone, err := stillThere(ctx, m.kv, key, from, covered-1)
			if err != nil || gone {
				return err
			}
			from = rev + 1
			m.raise(w, from)
		case <-a.e.lost:
			return a.lostError()
		case <-ctx.Done():
			return ctxError(ctx, "etcd acquire: waiting")
		case <-a.b.ctx.Done():
			return closedError("acquire")
		}
	}
}

// stillThere reads key once, at revision at or later, and reports whether
// the incarnation that existed at revision from-1 is gone, and the
// revision of the read.
//
// The read is first served by whichever member answers, from its own
// store, at exactly revision at: every member holds the same history, so
// that is the key's state at that revision, without the cost of a
// linearizable read. A member that has not applied revision at yet, or has
// compacted it away, refuses; the key is then read linearizably, at a
// revision >= at.
func stillThere(ctx context.Context, kv clientv3.KV, key string, from, at int64) (rev int64, gone bool, err error) {
	rev = at // not the header's revision: it is the member's current one
	resp, err := kv.Get(ctx, key, clientv3.WithKeysOnly(), clientv3.WithSerializable(), clientv3.WithRev(at))
	if err != nil && ctx.Err() == nil {
		resp, err = kv.Get(ctx, key, clientv3.WithKeysOnly())
		if err == nil {
			rev = resp.Header.GetRevision()
		}
	}
	if err != nil {
		return 0, false, rpcError(ctx, "acquire: checking the claim ahead", err)
	}
	gone = len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision >= from
	return rev, gone, nil
}
