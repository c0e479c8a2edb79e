package etcd

import (
	"context"
	"fmt"
)

// waitDeleted blocks until the incarnation of key that existed at revision
// from-1 is gone: no polling, and only the waiters directly behind a claim
// wake when it goes. It watches key alone, on the Backend's shared watch
// stream, created at etcd's current revision so that etcd serves it at
// once; the mux settles the deletes between from and that revision with a
// read (see watchcheck.go).
//
// It returns nil when the claim is gone. A nil return is only a hint:
// both callers re-read the queue with a Txn after it, so an early return
// costs a round trip, never exclusion. It returns the loss of our own
// claim (ErrLeaseExpired) as soon as its watch reports it, ctx's end,
// ErrClosed, or ErrUnavailable if etcd refused the watch. A stream that
// breaks meanwhile is reopened by the mux and the wait goes on.
func (a *acquisition) waitDeleted(ctx context.Context, key string, from int64) error {
	m := a.b.reg.mux
	p := newPredWait()
	w := &keyWatch{key: key, from: from, now: true, target: p}
	m.start(w)
	// Cancels the watch on every way out; after a delete it is a no-op.
	defer m.stop(w)
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("etcd acquire: %w", p.err)
		}
		return nil
	case <-a.e.lost:
		return a.lostError()
	case <-ctx.Done():
		return ctxError(ctx, "etcd acquire: waiting")
	case <-a.b.ctx.Done():
		return closedError("acquire")
	}
}
