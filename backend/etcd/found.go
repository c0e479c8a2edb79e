package etcd

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Claims found under our name. An enqueue finds its name taken only when
// a write under it was applied after its sender stopped waiting for it:
// most often the same enqueue, resent after a lost reply; rarely an
// earlier acquisition's write applied later still (registry.keepName keeps
// most such names out of use). Such a claim bound to our lease has no
// other owner, and is taken over; since the reply that told what was
// ahead of it was lost, the enqueue's check of the permit count is made
// again (agreesAhead).

// found continues an acquisition that found a claim under its name
// already. resp holds reads of that claim and of the head of the queue. If
// the claim is bound to our lease it is ours: holding the key if it is the
// head, else waiting in the queue (or ErrLocked for a TryAcquire, whose
// cleanup removes it). A claim of another lease is a stray, and one that
// has gone meanwhile is reported lost.
func (a *acquisition) found(ctx context.Context, resp *clientv3.TxnResponse, now time.Time) error {
	own := rangeKvs(resp, 0)
	if len(own) == 0 {
		return a.lostError() // deleted since the enqueue saw it
	}
	if err := a.adopt(ctx, own[0]); err != nil {
		return err
	}
	if head := rangeKvs(resp, 1); len(head) > 0 && head[0].CreateRevision == a.token {
		a.acquiredAt = recordedAt(own[0].Value, now)
		a.keepStamp(resp)
		return nil
	}
	if !a.req.Wait {
		return a.lockedError()
	}
	return a.waitInQueue(ctx, a.q(), "", 0)
}

// adoptExisting continues an enqueue whose Txn found a claim under our
// name already (see enqueue): it reads the claim and takes it over.
func (a *acquisition) adoptExisting(ctx context.Context) error {
	resp, err := a.b.cli.Get(ctx, a.e.key) // not keys-only: see adopt
	if err != nil {
		return rpcError(ctx, "acquire", err)
	}
	if len(resp.Kvs) == 0 {
		return a.lostError()
	}
	return a.adopt(ctx, resp.Kvs[0])
}

// agreesAhead checks that the claim just ahead of ours at each key agrees
// on the permit count (see kind.agrees): the nearest older claim, or for a
// shared claim the nearest older non-shared one, as the enqueue reads it.
// One Txn reads them all.
func (a *acquisition) agreesAhead(ctx context.Context) error {
	dirs := a.dirs
	if dirs == nil {
		dirs = []string{a.dir}
	}
	ops := make([]clientv3.Op, len(dirs))
	for i, dir := range dirs {
		if a.kind.Shared {
			ops[i] = olderNonShared(dir, a.token)
		} else {
			ops[i] = olderClaim(dir, a.token)
		}
	}
	resp, err := a.b.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return rpcError(ctx, "acquire", err)
	}
	for i := range dirs {
		if kvs := rangeKvs(resp, i); len(kvs) > 0 && !agrees(a.kind, string(kvs[0].Key)) {
			return a.mismatchError()
		}
	}
	return nil
}

// adopt takes over the claim kv found under our name if it is bound to our
// lease (then it is ours: nobody else creates claims under the name), and
// checks the permit count against the claim ahead (agreesAhead). kv must
// come from a read that is not keys-only: etcd leaves the lease out of
// keys-only replies (Lease 0), and the claim would look like another
// lease's.
func (a *acquisition) adopt(ctx context.Context, kv *mvccpb.KeyValue) error {
	if kv.Lease != int64(a.req.Lease) {
		// Claim names embed their lease; only a hand-made key can do this.
		a.token = kv.CreateRevision // the cleanup removes exactly it
		return fmt.Errorf("%w: etcd acquire %q: claim %s is bound to another lease",
			backend.ErrUnavailable, a.req.Key, kv.Key)
	}
	a.setToken(kv.CreateRevision)
	return a.agreesAhead(ctx)
}
