package etcd

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Counted claims (n > 1 permits). A counted claim holds once fewer than n
// claims are older than it (backend.Admits) and it has recorded its permit:
// the lowest one that no older claim has recorded, which it picks only
// once every older claim has recorded its own (backend.PermitFor): the
// older claims are all holders by then, so they pick first, in token
// order. That keeps the permits of the holders distinct without a lock,
// and makes the tokens issued for each permit increase (a newer claim never picks before an older one).
//
// Waiting (backend.WaitFor) costs a constant number of requests per
// admission, however many claims wait:
//
//   - a waiter with more than n older claims watches only its immediate
//     predecessor, for its delete and for the rewrite that records the
//     predecessor's permit when it is admitted;
//   - the first waiter (exactly n older claims, all holders) watches the
//     deletes of those n holders, with one watch of the queue directory
//     (watchrange.go), one create and one cancel however large n is; once
//     one is gone it qualifies (older claims can only go), picks its
//     permit and records it in one Txn guarded by its own incarnation,
//     which wakes the next waiter.
//
// So a release wakes only the first waiter, and its admission only the
// next one. While any older claim is of another kind (which can only be
// there through the race described at agrees), the rule (backend.Admits)
// does not admit a counted claim, and it waits for the delete of the
// newest such claim (backend.WaitFor), so that the kinds never hold at
// once.
//
// A counted request that does not queue takes the path of every such
// request (whenFree in acquire.go), which picks its permit with
// countedNext as well.

// waitCounted waits until the claim may hold a permit, then records it.
// Each round reads, in a Txn guarded by our incarnation, up to n+1 of the
// claims older than ours, newest first, with their records (for the
// permits), and then either watches as described above or records the
// permit.
func (a *acquisition) waitCounted(ctx context.Context) error {
	a.b.reg.waiting(a.e)
	n := a.kind.Permits
	older := clientv3.OpGet(a.dirs[0], clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithLimit(int64(n+1)), clientv3.WithMaxCreateRev(a.e.token-1))
	own := []clientv3.Cmp{incarnation(a.e.key, a.e.token)}
	for {
		resp, err := a.guarded(ctx, own, func() []clientv3.Op { return []clientv3.Op{older} })
		if err != nil {
			return err
		}
		p, watch, puts, err := a.countedNext(rangeKvs(resp, 0))
		switch {
		case err != nil:
			return err
		case watch == nil:
			// Record permit p, which makes the claim a holder. Written
			// twice (send tries again), it is harmless: no other claim
			// can pick p meanwhile, since the newer ones wait for this
			// record and the older ones have theirs.
			a.permit = p
			var now time.Time
			resp, err := a.guarded(ctx, own, func() []clientv3.Op {
				now = time.Now()
				return a.withStamp(rewrite(a.e.key, a.record(now, backend.Timestamp{})))
			})
			if err != nil {
				return err
			}
			return a.holds(now, resp)
		case len(watch) > 1:
			// The first waiter: any of the n holders.
			_, err = a.waitFor(ctx, newOlderWatch(a.dirs[0], a.e.token, n, resp.Header.Revision+1, nil))
		default:
			err = a.waitAny(ctx, watch, resp.Header.Revision+1, puts)
		}
		if err != nil {
			return err
		}
	}
}

// countedNext applies the queue rules of package backend to kvs, the
// claims just older than a counted claim, newest first, with their records
// (at most n+1 of them: a claim behind more waits like one behind n+1). If
// the rule admits the claim, it returns the permit to take (watch nil), or
// the older claim that has not recorded its own yet, whose rewrite (puts)
// the claim must wait for. Otherwise it returns the claims whose departure
// (and with puts, whose admission) the claim waits for. A claim of another
// kind ahead, there only through the race described at agrees, keeps the
// claim waiting until it goes.
func (a *acquisition) countedNext(kvs []*mvccpb.KeyValue) (permit int, watch []string, puts bool, err error) {
	i := len(kvs)
	q, permits := make([]backend.Kind, i+1), make([]int, i)
	for j, kv := range kvs {
		k := kindOfName(string(kv.Key))
		r, err := decodeClaim(kv.Value, k)
		if err != nil {
			return 0, nil, false, fmt.Errorf("%w: etcd acquire %q: claim %s: %w", backend.ErrUnavailable, a.req.Key, kv.Key, err)
		}
		q[i-1-j], permits[i-1-j] = k, r.Permit
	}
	q[i] = a.kind
	key := func(j int) string { return string(kvs[i-1-j].Key) }
	if backend.FreePrefix(q) > i {
		switch p, w := backend.PermitFor(permits, a.kind.Permits, i); {
		case w >= 0:
			return backend.NoPermit, []string{key(w)}, true, nil
		case p == backend.NoPermit:
			// n holders with distinct permits cannot all be older when
			// fewer than n claims are: only a corrupted queue gets here.
			return 0, nil, false, a.inconsistent()
		default:
			return p, nil, false, nil
		}
	}
	w := backend.WaitFor(q, i)
	for j := w.From; j <= w.To; j++ {
		watch = append(watch, key(j))
	}
	return backend.NoPermit, watch, w.Admission, nil
}
