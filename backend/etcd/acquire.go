package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Acquire creates a claim on req.Key, bound to lease req.Lease, and returns
// it once it holds the key. The claim is named by a UUID that the Backend
// lends this call alone (see names.go); the returned Claim.ID is that name,
// and req.ID is not used. See the package documentation for the protocol;
// in short:
//
//   - Fair waiting requests (Wait and Fair) join the key's queue in one
//     Txn. Uncontended, that Txn already makes the claim the holder: one
//     round trip. Otherwise Acquire watches only the delete of the claim
//     just ahead and, after it, checks in one Txn that its own claim still
//     exists and has nothing ahead of it.
//   - Requests that do not queue (Wait false, or Fair false) create their
//     claim only in a Txn that finds the queue empty. With Wait false that
//     is a single round trip that leaves nothing behind when the key is
//     held (ErrLocked). With Fair false Acquire watches the newest claim of
//     the queue until the queue is empty.
//   - With req.Stamp set, the previous holder's stamp is read in the same
//     Txn that makes the claim the holder and the new stamp is written in
//     one more Txn, guarded by the claim's identity: one extra round trip.
//
// Acquire blocks until the claim holds the key, ctx ends, the claim
// vanishes (its lease ended or it was deleted: ErrLeaseExpired), etcd
// fails (ErrUnavailable) or the Backend is closed (ErrClosed). When it fails
// after its claim may have been created - even if etcd's reply was lost -
// it deletes the claim by its name with a bounded context of its own, not
// ctx, which may have ended. It does so before returning (waiting at most
// 5s more for a slow etcd, 1s if ctx has ended), except when ctx ended
// while etcd was not answering: then, so as not to hold the caller past its
// deadline, and whenever that first attempt fails, the deletion is retried
// in the background until it succeeds or the Backend is closed; the name
// is not lent again before it has. Safe for concurrent use.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Claim, error) {
	if b.closed.Load() {
		return backend.Claim{}, closedError("acquire")
	}
	if err := checkRequest(req); err != nil {
		return backend.Claim{}, err
	}
	if ctx.Err() != nil {
		return backend.Claim{}, ctxError(ctx, "etcd acquire")
	}
	l := b.names.borrow(req.Key)
	name := l.name
	a := &acquisition{b: b, req: req, name: name, claimKey: l.queue.dir + name, queue: l.queue}
	if req.Stamp != nil {
		a.stampKey = b.layout.stamp(req.Key)
	}
	e, err := b.reg.add(a.claimKey, req.OnLost, l.watch)
	if err != nil {
		// A lent name is no other acquisition's, so this is a bug; the
		// name is forgotten rather than lent again.
		return backend.Claim{}, err
	}
	a.e = e
	if req.Wait && b.reg.watchesEarly(l.short) {
		b.reg.watchEarly(e) // before the claim exists: see registry.go
	}
	c, err := a.run(ctx)
	if err == nil && !b.reg.promote(e) {
		err = a.lostError()
	}
	if err != nil {
		if !a.mayExist {
			// No claim was created under the name: it goes back at once,
			// with its watch.
			b.names.giveBack(req.Key, name, b.reg.detach(e))
			return backend.Claim{}, err
		}
		b.reg.remove(e)
		// Clean up before returning unless that could keep the caller
		// long past its deadline: etcd just failed to answer in time.
		now := ctx.Err() == nil || !errors.Is(err, backend.ErrUnavailable)
		// The name is lent again only once its claim is known gone.
		b.discard(ctx, a.claimKey, a.token, now, func() { b.names.giveBack(req.Key, name, nil) })
		return backend.Claim{}, err
	}
	return c, nil
}

func checkRequest(req backend.AcquireRequest) error {
	switch {
	case req.Key == "":
		return errors.New("etcd acquire: empty key")
	case req.Lease == 0:
		// A claim without a lease would never expire.
		return fmt.Errorf("%w: etcd acquire: no lease", backend.ErrLeaseExpired)
	}
	return nil
}

// acquisition is the state of one Acquire call.
type acquisition struct {
	b    *Backend
	req  backend.AcquireRequest
	e    *entry
	name string // the claim's name, lent by b.names

	claimKey string
	queue    *queueRead // of req.Key: its directory and newest-claim read
	stampKey string     // "" unless the request stamps

	mayExist   bool  // the claim may exist in etcd: remove it on failure
	token      int64 // create revision of the claim, once known
	acquiredAt time.Time
	prevStamp  []byte // stamp record read when the claim became holder; nil if none
}

func (a *acquisition) run(ctx context.Context) (backend.Claim, error) {
	var err error
	if a.req.Wait && a.req.Fair {
		err = a.enqueue(ctx)
	} else {
		err = a.whenFree(ctx)
	}
	if err != nil {
		return backend.Claim{}, err
	}
	var st backend.Timestamp
	if a.req.Stamp != nil {
		if st, err = a.stamp(ctx); err != nil {
			return backend.Claim{}, err
		}
	}
	return backend.Claim{
		Key:        a.req.Key,
		ID:         a.name,
		Lease:      a.req.Lease,
		Token:      uint64(a.token),
		AcquiredAt: a.acquiredAt,
		Stamp:      st,
	}, nil
}

// record is the claim's value with the current time as acquired-at. A
// waiter rewrites it when it becomes the holder, so Inspect reports when
// the claim came to hold the key, not when it was queued.
func (a *acquisition) record(now time.Time, st backend.Timestamp) string {
	return encodeClaim(claimRecord{Owner: a.req.Owner, AcquiredAt: now, Stamp: st})
}

// ownExists is the guard used wherever only this claim, this incarnation,
// may act (identity = key + create revision).
func (a *acquisition) ownExists() clientv3.Cmp {
	return incarnation(a.claimKey, a.token)
}

// withStamp appends a read of the stamp record when the request stamps.
func (a *acquisition) withStamp(ops ...clientv3.Op) []clientv3.Op {
	if a.req.Stamp != nil {
		ops = append(ops, clientv3.OpGet(a.stampKey))
	}
	return ops
}

// keepStamp remembers the stamp record read at index i of resp, if any.
func (a *acquisition) keepStamp(resp *clientv3.TxnResponse, i int) {
	if a.req.Stamp == nil || i >= len(resp.Responses) {
		return
	}
	if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
		a.prevStamp = kvs[0].Value
	}
}

// setToken records the claim's create revision, failing if the claim's watch
// has already seen the claim go.
func (a *acquisition) setToken(token int64) error {
	a.token = token
	if !a.b.reg.setToken(a.e, token) {
		return a.lostError()
	}
	return nil
}

func (a *acquisition) lostError() error {
	return fmt.Errorf("%w: etcd acquire %q: claim %s vanished (lease ended or deleted)",
		backend.ErrLeaseExpired, a.req.Key, a.claimKey)
}
