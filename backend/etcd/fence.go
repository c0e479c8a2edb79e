package etcd

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Fences. A create that got no answer may still be applied by etcd, later
// than requests sent after it (held up on the way). Applied after the
// cleanup of its Acquire deleted the claim, it would make a claim under
// our name, bound to our live lease, that blocks the key for as long as
// the lease lives. So every Txn that creates a claim also compares the
// lease's fence key (layout.fence): its mod revision must be at most
// Backend.fenced, a revision the Backend saw before sending the Txn. The
// cleanup of a claim whose create got no answer deletes it by name and
// puts the fence, in one Txn (fenceDelete): that put is at a revision above
// every one that existed when the create was sent, so the create, if it
// comes later, fails. An enqueue whose create was sent more than once
// moves the fence the same way once it has an answer (enqueue), so that
// an earlier try applied after the claim's release makes nothing either.
//
// The cleanup's Txn is fenced like a create, so that a try of it applied
// late deletes nothing: each try compares the fence with a revision seen
// before it was sent, and the first that succeeds moves the fence past
// them all. The name is free again once a try has succeeded. A create
// that fails only because the fence moved (another cleanup of the lease
// meanwhile) learns the new revision and is sent again (refenced). The
// fence is bound to its lease and goes with it; a lease whose requests all
// got their answers never has one.

// fenceCmp holds while the fence of lease has not been put after revision
// seen.
func (b *Backend) fenceCmp(lease backend.LeaseID, seen int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(b.fenceKey(lease)), "<", seen+1)
}

// leaseFence is a lease's fence key.
type leaseFence struct {
	lease backend.LeaseID
	key   string
}

// fenceKey returns layout.fence(lease), kept for the last lease asked
// about: every create compares its lease's fence, and a client mostly makes
// its claims under one lease.
func (b *Backend) fenceKey(lease backend.LeaseID) string {
	if f := b.fence.Load(); f != nil && f.lease == lease {
		return f.key
	}
	f := &leaseFence{lease: lease, key: b.layout.fence(lease)}
	b.fence.Store(f)
	return f.key
}

// saw raises Backend.fenced to rev, a revision etcd answered at.
func (b *Backend) saw(rev int64) {
	for cur := b.fenced.Load(); rev > cur && !b.fenced.CompareAndSwap(cur, rev); cur = b.fenced.Load() {
	}
}

// fenceDelete deletes what is under the etcd keys keys, by name, and puts
// the fence of lease, in one Txn fenced itself. A lease that has ended
// took its claims with it: that counts as done.
func (b *Backend) fenceDelete(ctx context.Context, lease backend.LeaseID, keys ...string) error {
	ops := []clientv3.Op{clientv3.OpPut(b.fenceKey(lease), "", clientv3.WithLease(clientv3.LeaseID(lease)))}
	for _, k := range keys {
		ops = append(ops, clientv3.OpDelete(k))
	}
	for {
		resp, err := b.cli.Txn(ctx).If(b.fenceCmp(lease, b.fenced.Load())).Then(ops...).Commit()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return nil
		case err != nil:
			return err
		}
		b.saw(resp.Header.Revision)
		if resp.Succeeded {
			return nil
		}
	}
}

// creating returns txn with the compares cmps and the lease's fence, ops
// to run if they hold and els if not, and the revision the fence is
// compared with, for refenced.
func (a *acquisition) creating(txn clientv3.Txn, cmps []clientv3.Cmp, ops, els []clientv3.Op) (clientv3.Txn, int64) {
	seen := a.b.fenced.Load()
	// If copies the compares, so a slot past cmps, if the caller left one,
	// can take the fence's on every try.
	cmps = append(cmps, a.b.fenceCmp(a.req.Lease, seen))
	return txn.If(cmps...).Then(ops...).Else(els...), seen
}

// fenceRead reads the lease's fence; as the last operation of a failed
// Txn, for refenced.
func (a *acquisition) fenceRead() clientv3.Op {
	return clientv3.OpGet(a.b.fenceKey(a.req.Lease), clientv3.WithKeysOnly())
}

// refenced reports whether resp, whose last operation is fenceRead (in the
// Else branch of a failed Txn made by creating, or in reads sent after
// it), found the fence put after seen; the Backend then knows of it, and
// the Txn may be sent again.
func (a *acquisition) refenced(resp *clientv3.TxnResponse, seen int64) bool {
	kvs := rangeKvs(resp, len(resp.Responses)-1)
	if len(kvs) == 0 || kvs[0].ModRevision <= seen {
		return false
	}
	a.b.saw(resp.Header.Revision)
	return true
}
