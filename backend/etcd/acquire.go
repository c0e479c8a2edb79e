package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Acquire creates the claim req.ID on req.Key, bound to lease req.Lease,
// and returns it once it holds the key. See the package documentation for
// the protocol; in short:
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
// ctx, which may have ended. It does so before returning (taking up to 5s
// more if etcd is slow), except when ctx ended while etcd was not answering:
// then, so as not to hold the caller far past its deadline, and whenever
// the first attempt fails, the deletion is retried in the background until
// it succeeds or the Backend is closed.
// Safe for concurrent use; two concurrent calls must not share a claim ID.
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
	a := &acquisition{
		b:        b,
		req:      req,
		claimKey: b.layout.claim(req.Key, req.ID),
		dir:      b.layout.dir(req.Key),
		stampKey: b.layout.stamp(req.Key),
	}
	e, err := b.reg.add(a.claimKey, req.OnLost)
	if err != nil {
		return backend.Claim{}, err
	}
	a.e = e
	c, err := a.run(ctx)
	if err == nil && !b.reg.promote(e) {
		err = a.lostError()
	}
	if err != nil {
		b.reg.remove(e)
		if a.mayExist {
			// Clean up before returning unless that could keep the caller
			// long past its deadline: etcd just failed to answer in time.
			now := ctx.Err() == nil || !errors.Is(err, backend.ErrUnavailable)
			b.discard(ctx, a.claimKey, a.token, now)
		}
		return backend.Claim{}, err
	}
	return c, nil
}

func checkRequest(req backend.AcquireRequest) error {
	switch {
	case req.Key == "":
		return errors.New("etcd acquire: empty key")
	case req.ID == "":
		return errors.New("etcd acquire: empty claim ID")
	case req.Lease == 0:
		// A claim without a lease would never expire.
		return fmt.Errorf("%w: etcd acquire: no lease", backend.ErrLeaseExpired)
	}
	return nil
}

// acquisition is the state of one Acquire call.
type acquisition struct {
	b   *Backend
	req backend.AcquireRequest
	e   *entry

	claimKey, dir, stampKey string

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
		ID:         a.req.ID,
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
	return clientv3.Compare(clientv3.CreateRevision(a.claimKey), "=", a.token)
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

// setToken records the claim's create revision, failing if the loss watch
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

// enqueue is the fair path. One Txn: if the claim does not exist yet, read
// the newest claim of the queue (the one just ahead of us), then create
// ours; otherwise - an Acquire retried after a lost reply - read our claim
// and the head of the queue.
func (a *acquisition) enqueue(ctx context.Context) error {
	now := time.Now()
	notYet := clientv3.Compare(clientv3.CreateRevision(a.claimKey), "=", 0)
	put := clientv3.OpPut(a.claimKey, a.record(now, backend.Timestamp{}), clientv3.WithLease(clientv3.LeaseID(a.req.Lease)))
	// Ops of a Txn run in order: this Get sees the queue before our Put.
	ahead := clientv3.OpGet(a.dir, clientv3.WithLastCreate()...)
	head := clientv3.OpGet(a.dir, clientv3.WithFirstCreate()...)

	a.mayExist = true
	resp, err := a.b.cli.Txn(ctx).If(notYet).
		Then(a.withStamp(ahead, put)...).
		Else(a.withStamp(clientv3.OpGet(a.claimKey), head)...).
		Commit()
	if err != nil {
		return rpcError(ctx, "acquire", err)
	}
	if resp.Succeeded {
		if err := a.setToken(resp.Header.Revision); err != nil {
			return err
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			a.acquiredAt = now
			a.keepStamp(resp, 2)
			return nil // the queue was empty: we hold the key
		}
		return a.waitInQueue(ctx, string(kvs[0].Key), resp.Header.Revision)
	}

	own := resp.Responses[0].GetResponseRange().GetKvs()
	if len(own) == 0 {
		return fmt.Errorf("%w: etcd acquire: claim %s reported both present and absent", backend.ErrUnavailable, a.claimKey)
	}
	if err := a.setToken(own[0].CreateRevision); err != nil {
		return err
	}
	if hk := resp.Responses[1].GetResponseRange().GetKvs(); len(hk) > 0 && hk[0].CreateRevision == a.token {
		a.acquiredAt = recordedAt(own[0].Value, now)
		a.keepStamp(resp, 2)
		return nil
	}
	return a.waitInQueue(ctx, "", 0)
}

// recordedAt returns the acquired-at stored in a claim value, or def if the
// value cannot be read.
func recordedAt(v []byte, def time.Time) time.Time {
	if r, err := decodeClaim(v); err == nil && !r.AcquiredAt.IsZero() {
		return r.AcquiredAt
	}
	return def
}

// waitInQueue waits until the claim is the oldest of its queue. pred is the
// claim just ahead as read at revision rev ("" to look it up first).
//
// Each round watches only pred's delete - a release wakes just the next
// waiter - and then runs one Txn that, if our claim still exists (the
// Jepsen fix: a waiter whose claim vanished must not go on to hold the key)
// and no older claim is left, stamps our claim with the acquired-at time
// and reads the previous stamp; otherwise it returns our claim and the
// nearest older claim, which may be one that was queued before pred.
func (a *acquisition) waitInQueue(ctx context.Context, pred string, rev int64) error {
	for {
		if pred != "" {
			if err := a.waitDeleted(ctx, pred, rev+1); err != nil {
				return err
			}
		}
		now := time.Now()
		// True iff every claim of the queue was created at or after ours.
		first := clientv3.Compare(clientv3.CreateRevision(a.dir), ">", a.token-1).WithPrefix()
		older := clientv3.OpGet(a.dir, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(a.token-1))...)
		resp, err := a.b.cli.Txn(ctx).If(a.ownExists(), first).
			Then(a.withStamp(clientv3.OpPut(a.claimKey, a.record(now, backend.Timestamp{}), clientv3.WithIgnoreLease()))...).
			Else(clientv3.OpGet(a.claimKey), older).
			Commit()
		if err != nil {
			return rpcError(ctx, "acquire", err)
		}
		if resp.Succeeded {
			a.acquiredAt = now
			a.keepStamp(resp, 1)
			return nil
		}
		own := resp.Responses[0].GetResponseRange().GetKvs()
		if len(own) == 0 || own[0].CreateRevision != a.token {
			return a.lostError()
		}
		pred, rev = "", resp.Header.Revision
		if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
			pred = string(kvs[0].Key)
		}
	}
}

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
		empty := clientv3.Compare(clientv3.CreateRevision(a.dir), "=", 0).WithPrefix()
		put := clientv3.OpPut(a.claimKey, a.record(now, backend.Timestamp{}), clientv3.WithLease(clientv3.LeaseID(a.req.Lease)))
		newest := clientv3.OpGet(a.dir, clientv3.WithLastCreate()...)
		head := clientv3.OpGet(a.dir, clientv3.WithFirstCreate()...)

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
			// Our claim exists: a retry after a lost reply.
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
			continue // emptied between the compare and the read: cannot happen in one Txn, but harmless
		}
		if err := a.waitDeleted(ctx, string(kvs[0].Key), resp.Header.Revision+1); err != nil {
			return err
		}
	}
}

func (a *acquisition) lockedError() error {
	return fmt.Errorf("etcd acquire %q: %w", a.req.Key, backend.ErrLocked)
}

// stamp calls req.Stamp with the previous holder's stamp and records the
// result, in the stamp record and in the claim, with one Txn that commits
// only while the claim still exists: a claim that lost the key never
// records a stamp.
func (a *acquisition) stamp(ctx context.Context) (backend.Timestamp, error) {
	var prev backend.Timestamp
	if a.prevStamp != nil {
		p, err := decodeStamp(a.prevStamp)
		if err != nil {
			return backend.Timestamp{}, fmt.Errorf("etcd acquire %q: stamp record %s: %w", a.req.Key, a.stampKey, err)
		}
		prev = p
	}
	st, err := a.req.Stamp(prev)
	if err != nil {
		return backend.Timestamp{}, err
	}
	resp, err := a.b.cli.Txn(ctx).If(a.ownExists()).
		Then(
			clientv3.OpPut(a.stampKey, encodeStamp(st)),
			clientv3.OpPut(a.claimKey, a.record(a.acquiredAt, st), clientv3.WithIgnoreLease()),
		).Commit()
	if err != nil {
		return backend.Timestamp{}, rpcError(ctx, "acquire (stamp)", err)
	}
	if !resp.Succeeded {
		return backend.Timestamp{}, a.lostError()
	}
	return st, nil
}
