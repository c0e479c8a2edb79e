package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Shared claims. A shared claim holds once no non-shared (exclusive or
// counted) claim is older than it, so it only ever looks at the key range
// of non-shared claims (kind.go): it never waits for another shared claim,
// and a writer's release wakes every reader queued behind it up to the
// next writer at once, each through its own watch of that writer's claim.

// enqueueShared is the fair path of a shared claim: one Txn creates the
// claim if it does not exist yet and reads the newest non-shared claim
// (keys only). Uncontended, or behind readers only, that is the whole
// acquisition.
func (a *acquisition) enqueueShared(ctx context.Context) error {
	now := time.Now()
	resp, err := a.create(ctx, []clientv3.Cmp{a.absent()}, a.withStamp(olderNonShared(a.dir, 0), a.put(now))...)
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		if err := a.adoptExisting(ctx); err != nil {
			return err
		}
		return a.waitShared(ctx, a.q(), "", 0)
	}
	a.setToken(resp.Header.Revision)
	kvs := rangeKvs(resp, 0)
	if len(kvs) == 0 {
		return a.holds(now, resp)
	}
	if !agrees(a.kind, string(kvs[0].Key)) {
		return a.mismatchError()
	}
	return a.waitShared(ctx, a.q(), string(kvs[0].Key), resp.Header.Revision)
}

// waitShared waits until no non-shared claim older than ours is left at q.
// pred is the nearest older non-shared claim as read at revision rev (""
// to look it up first). Each round watches only pred's delete, then runs
// one Txn that, if our claim still exists and no older non-shared claim
// is left, records the acquired-at time (and reads the previous stamp).
//
// "No older non-shared claim" is "the range of non-shared claims is empty,
// or all of it is newer than ours". A compare over an empty range
// compares against a zero KeyValue, so "every create revision is above
// ours" is false for an empty range: the Txn tests the non-empty case in
// its If and the empty one in a nested Txn of its Else, which also reads
// what the next round needs.
func (a *acquisition) waitShared(ctx context.Context, q queueKey, pred string, rev int64) error {
	a.b.reg.waiting(a.e)
	own := incarnation(q.key, a.token)
	allNewer := clientv3.Compare(clientv3.CreateRevision(nonSharedStart(q.dir)), ">", a.token-1).WithRange(nonSharedEnd(q.dir))
	for {
		if pred != "" {
			if err := a.waitDeleted(ctx, pred, rev+1); err != nil {
				return err
			}
		}
		var now time.Time
		resp, err := a.send(ctx, func(txn clientv3.Txn) clientv3.Txn {
			now = time.Now()
			put := rewrite(q.key, a.record(now, backend.Timestamp{}))
			return txn.If(own, allNewer).
				Then(a.withStamp(put)...).
				Else(a.withStamp(clientv3.OpGet(q.key, clientv3.WithKeysOnly()), olderNonShared(q.dir, a.token),
					clientv3.OpTxn([]clientv3.Cmp{own, noNonShared(q.dir)}, []clientv3.Op{put}, nil))...)
		})
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return a.holds(now, resp)
		}
		if o := rangeKvs(resp, 0); len(o) == 0 || o[0].CreateRevision != a.token {
			return a.lostError()
		}
		older := rangeKvs(resp, 1)
		if len(older) == 0 {
			if !resp.Responses[2].GetResponseTxn().GetSucceeded() {
				return a.inconsistent()
			}
			return a.holds(now, resp)
		}
		pred, rev = string(older[0].Key), resp.Header.Revision
	}
}

// whenFreeShared is the path of shared requests that do not queue: one
// Txn creates the claim only if the key has no non-shared claim. With
// Fair false it otherwise waits for the newest non-shared claim to go and
// tries again.
func (a *acquisition) whenFreeShared(ctx context.Context) error {
	notYet := a.absent()
	for {
		now := time.Now()
		a.mayExist = true
		resp, err := a.b.cli.Txn(ctx).If(noNonShared(a.dir), notYet).
			Then(a.withStamp(a.put(now))...).
			Else(clientv3.OpGet(a.e.key), olderNonShared(a.dir, 0)). // with its lease, for adopt
			Commit()
		if err != nil {
			return rpcError(ctx, "acquire", err)
		}
		if resp.Succeeded {
			a.setToken(resp.Header.Revision)
			return a.holds(now, resp)
		}
		if own := rangeKvs(resp, 0); len(own) > 0 {
			// A stray of ours under the name (see enqueue).
			if err := a.adopt(ctx, own[0]); err != nil {
				return err
			}
			if !a.req.Wait {
				return a.lockedError()
			}
			return a.waitShared(ctx, a.q(), "", 0)
		}
		a.mayExist = false
		newest := rangeKvs(resp, 1)
		if len(newest) == 0 {
			return a.inconsistent()
		}
		if !agrees(a.kind, string(newest[0].Key)) {
			return a.mismatchError()
		}
		if !a.req.Wait {
			return a.lockedError()
		}
		if err := a.waitDeleted(ctx, string(newest[0].Key), resp.Header.Revision+1); err != nil {
			return err
		}
	}
}
