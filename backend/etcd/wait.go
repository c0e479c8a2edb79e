package etcd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ash-lock/ashlock/backend"
)

// waitAt waits until the claim is admitted at its i-th key, for
// every kind but counted (counted.go). pred is the claim ahead that blocks
// it, as read at revision rev ("" to look it up first): the newest older
// claim for an exclusive claim, which waits for every claim ahead to go;
// the newest older non-shared claim for a shared one (kind.go).
//
// Each round watches only pred's delete - a release wakes just the claims
// directly behind it: the next writer, or the readers up to the next
// writer - and then runs one Txn that, if our claim still exists (a
// waiter whose claim vanished must not go on to hold the key) and nothing
// older blocks it (firstOf), rewrites our record with the acquired-at
// time and reads the previous stamp; otherwise it returns our claim and
// the nearest older claim that blocks it, which may be one queued before
// pred. A shared claim's range can be empty, which the compare reads as
// blocked: a nested Txn in the Else branch admits it then.
//
// While etcd cannot be reached the wait goes on (see send).
func (a *acquisition) waitAt(ctx context.Context, i int, pred string, rev int64) error {
	a.b.reg.waiting(a.e)
	dir, key := a.dirs[i], a.e.keys[i]
	own := incarnation(key, a.e.token)
	first := firstOf(a.kind, dir, a.e.token)
	for {
		cmps := []clientv3.Cmp{own, first}
		if pred != "" {
			prev, err := a.waitFor(ctx, &keyWatch{key: pred, from: rev + 1, now: true, prev: true})
			if err != nil {
				return err
			}
			if a.heldBefore(prev) {
				cmps = cmps[:1]
			}
		}
		var now time.Time
		resp, err := a.send(ctx, func(txn clientv3.Txn) clientv3.Txn {
			now = time.Now()
			put := rewrite(key, a.record(now, backend.Timestamp{}))
			els := []clientv3.Op{clientv3.OpGet(key, clientv3.WithKeysOnly()), aheadOf(a.kind, dir, a.e.token)}
			if a.kind.Shared {
				els = a.withStamp(append(els, clientv3.OpTxn([]clientv3.Cmp{own, freeOf(a.kind, dir)}, []clientv3.Op{put}, nil))...)
			}
			return txn.If(cmps...).Then(a.withStamp(put)...).Else(els...)
		})
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return a.holds(now, resp)
		}
		if o := rangeKvs(resp, 0); len(o) == 0 || o[0].CreateRevision != a.e.token {
			return a.lostError()
		}
		older := rangeKvs(resp, 1)
		switch {
		case len(older) > 0:
			pred, rev = string(older[0].Key), resp.Header.Revision
		case a.kind.Shared && resp.Responses[2].GetResponseTxn().GetSucceeded():
			return a.holds(now, resp)
		default:
			return a.inconsistent() // the compare saw an older claim, the read did not
		}
	}
}

// heldBefore reports whether prev, the last state of the claim a waiter
// waited for at one key (its predecessor there, as read at some revision:
// the newest older claim that blocks it), shows that claim to have been
// an exclusive claim admitted at that key. Then the waiter's admission
// needs no compare over the queue (firstOf), only its own claim's
// existence. When the predecessor was admitted no older claim existed at
// the key, and none can appear later (a create takes a new, higher
// revision); no claim that blocks the waiter and is younger than the
// predecessor existed when it was read, so none ever will; and the
// predecessor is gone. An exclusive claim waits for every older claim, so
// this holds for an exclusive and for a shared waiter alike; a shared or
// counted predecessor can hold beside older claims, and tells nothing.
//
// After its create only an admitted claim's record is rewritten at a key:
// by the Txn that admits it there (waitAt), by its stamp, written once it
// holds every key, and by SetValue, which takes a claim Acquire returned.
// (A counted claim's record is rewritten when it takes a permit, which
// admits it beside older claims: the kind rules it out.) So, from an
// exclusive claim, a modification revision above the create revision is
// proof. A claim that held from its enqueue was never
// rewritten and proves nothing; nor does a predecessor whose delete a read
// found rather than the watch (no last state). Either way the waiter
// makes the full check.
func (a *acquisition) heldBefore(prev *mvccpb.KeyValue) bool {
	return prev != nil && prev.CreateRevision < a.e.token && prev.ModRevision > prev.CreateRevision &&
		backend.HoldsAlone(kindOfName(string(prev.Key)))
}

// waitAny blocks until the incarnation of one of keys that existed at
// revision from-1 is gone (with puts, or rewritten: a counted waiter's
// predecessor recording its permit), without polling: it watches those
// keys alone, on the Backend's shared watch stream, so only the waiters
// directly behind a claim wake when it goes. Each watch is created at
// etcd's current revision so that etcd serves it at once; the mux settles
// the deletes between from and that revision with a read (watchcheck.go).
func (a *acquisition) waitAny(ctx context.Context, keys []string, from int64, puts bool) error {
	ws := make([]*keyWatch, len(keys))
	for i, k := range keys {
		ws[i] = &keyWatch{key: k, from: from, now: true, puts: puts}
	}
	_, err := a.waitFor(ctx, ws...)
	return err
}

// waitFor starts ws, waits for the first of them to fire, and stops them
// all. A nil error is only a hint: every caller re-reads the queue with a
// Txn after it, so an early return costs a round trip, never exclusion
// (unless the last state returned proves its point, see heldBefore). It
// returns the loss of our own claim (ErrLeaseExpired) as soon as its watch
// reports it, ctx's end, ErrClosed, or ErrUnavailable if etcd refused a
// watch. A stream that breaks meanwhile is reopened by the mux and the wait
// goes on. It also returns the last state of the incarnation whose delete
// ended the wait, if a watch with keyWatch.prev set reported it.
func (a *acquisition) waitFor(ctx context.Context, ws ...*keyWatch) (*mvccpb.KeyValue, error) {
	p := &predWait{done: make(chan struct{})}
	m := a.b.reg.mux
	for _, w := range ws {
		w.target = p
		m.start(w)
	}
	defer func() {
		for _, w := range ws {
			m.stop(w) // after a delete it is a no-op
		}
	}()
	err := pause(ctx, a, p.done, func() error {
		return fmt.Errorf("etcd acquire: waiting: %w", backend.ContextError(ctx))
	})
	if err == nil && p.news.err != nil {
		return nil, fmt.Errorf("etcd acquire: %w", p.news.err)
	}
	return p.news.prev, err
}

// predWait is the target of the watches a waiter keeps on the claims it
// waits behind; the first call it hears wins.
type predWait struct {
	once sync.Once
	done chan struct{} // closed by notify
	news watchNews     // written before done is closed: why the watch failed (err) or the deleted state (prev)
}

func (p *predWait) notify(n watchNews) { p.once.Do(func() { p.news = n; close(p.done) }) }

// guarded sends (see send) a Txn whose compares own are the claim's
// identity and whose operations ops returns (called for each try); it
// returns etcd's answer, or lostError if the claim is gone.
func (a *acquisition) guarded(ctx context.Context, own []clientv3.Cmp, ops func() []clientv3.Op) (*clientv3.TxnResponse, error) {
	resp, err := a.send(ctx, func(txn clientv3.Txn) clientv3.Txn { return txn.If(own...).Then(ops()...) })
	if err == nil && !resp.Succeeded {
		return nil, a.lostError()
	}
	return resp, err
}

// send sends the Txn that build makes (called anew for each try) and
// returns etcd's answer. While etcd is merely out of reach (codes.Unavailable:
// a member down, no leader, a connection lost mid-call) the claim keeps its
// place as long as its lease lives, so send tries again, with backoff. It
// gives up when the error is of another kind, or when ctx ends, the claim
// is lost or the Backend closes first. The client ends ctx itself once it
// stops trusting the lease.
func (a *acquisition) send(ctx context.Context, build func(clientv3.Txn) clientv3.Txn) (*clientv3.TxnResponse, error) {
	var bo backend.Backoff
	for {
		resp, err := build(a.b.cli.Txn(ctx)).Commit()
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil || status.Code(err) != codes.Unavailable {
			return nil, rpcError(ctx, "acquire", err)
		}
		t := time.NewTimer(bo.Next())
		perr := pause(ctx, a, t.C, func() error { return rpcError(ctx, "acquire", err) })
		t.Stop()
		if perr != nil {
			return nil, perr
		}
	}
}

// pause waits for ch, or returns the error to give up with if the claim is
// lost, ctx ends (the error ended returns) or the Backend closes first.
func pause[T any](ctx context.Context, a *acquisition, ch <-chan T, ended func() error) error {
	select {
	case <-ch:
		return nil
	case <-a.e.lost:
		return a.lostError()
	case <-ctx.Done():
		return ended()
	case <-a.b.ctx.Done():
		return closedError("acquire")
	}
}
