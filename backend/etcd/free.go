package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// whenFree is the path of requests that take no place in the queue: create
// the claim only if the queue is empty, in one Txn. With Wait false that is
// the whole story; with Fair false, Acquire otherwise watches the newest
// claim of the queue and tries again once it is gone.
//
// A non-queued request can only win when no fair request is queued, so
// queued requests always go first and both kinds exclude each other (the
// claim it creates is the head of the same queue). It trades fairness for
// not being in anyone's way: it can starve under a steady stream of fair
// requests, and when the queue empties every non-queued waiter of the key
// wakes and races (the losers go back to watching the winner's claim).
func (a *acquisition) whenFree(ctx context.Context) error {
	for {
		now := time.Now()
		empty := clientv3.Compare(clientv3.CreateRevision(a.queue.dir), "=", 0).WithPrefix()
		put := clientv3.OpPut(a.claimKey, a.record(now, backend.Timestamp{}), clientv3.WithLease(clientv3.LeaseID(a.req.Lease)))
		newest := clientv3.OpGet(a.queue.dir, newestKey...)
		head := clientv3.OpGet(a.queue.dir, oldestKey...)

		a.mayExist = true
		resp, err := a.b.cli.Txn(ctx).If(empty).
			Then(a.withStamp(put)...).
			Else(a.withStamp(clientv3.OpGet(a.claimKey), newest, head)...).
			Commit()
		if err != nil {
			return rpcError(ctx, "acquire", err)
		}
		if resp.Succeeded {
			if err := a.setToken(resp.Header.Revision); err != nil {
				return err
			}
			a.acquiredAt = now
			a.keepStamp(resp, 1)
			return nil
		}
		if own := resp.Responses[0].GetResponseRange().GetKvs(); len(own) > 0 {
			// A claim exists under our name (see enqueue for how).
			if own[0].Lease != int64(a.req.Lease) {
				return a.stray(own[0].CreateRevision)
			}
			if err := a.setToken(own[0].CreateRevision); err != nil {
				return err
			}
			if hk := resp.Responses[2].GetResponseRange().GetKvs(); len(hk) > 0 && hk[0].CreateRevision == a.token {
				a.acquiredAt = recordedAt(own[0].Value, now)
				a.keepStamp(resp, 3)
				return nil
			}
			if !a.req.Wait {
				return a.lockedError() // the claim is removed by Acquire's cleanup
			}
			return a.waitInQueue(ctx, "", 0)
		}
		a.mayExist = false
		if !a.req.Wait {
			return a.lockedError()
		}
		kvs := resp.Responses[1].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			// The compare saw a claim that the read in the same Txn did
			// not: etcd broke its own atomicity. Looping would spin.
			return a.inconsistent()
		}
		if err := a.waitDeleted(ctx, string(kvs[0].Key), resp.Header.Revision+1); err != nil {
			return err
		}
	}
}

func (a *acquisition) lockedError() error {
	return fmt.Errorf("etcd acquire %q: %w", a.req.Key, backend.ErrLocked)
}
