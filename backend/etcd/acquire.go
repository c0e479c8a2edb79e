package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Options of the reads of a queue directory: only the claims' keys and
// revisions are used, never their values. An OpOption keeps no state, so
// one slice of each serves every read (a caller that adds an option
// appends to a full-capacity slice, which copies).
var (
	newestKey = append(clientv3.WithLastCreate(), clientv3.WithKeysOnly())
	oldestKey = append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())
)

// Acquire creates a claim on req.Key (on every key of req.Keys), bound to
// lease req.Lease, and returns it once it holds the key. The claim is named
// after its lease and kind (see the package documentation); Claim.ID is
// that name, and req.ID is not used. What follows is the exclusive path;
// shared.go, counted.go and multikey.go describe the other kinds, which
// follow the same pattern.
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
//   - With req.Stamp set, the previous holder's stamp is read in the Txn
//     that makes the claim the holder and the new stamp is written in one
//     more Txn, guarded by the claim's identity: one extra round trip.
//
// Acquire blocks until the claim holds the key, ctx ends, the claim
// vanishes (its lease ended or it was deleted: ErrLeaseExpired), etcd
// fails (ErrUnavailable) or the Backend is closed (ErrClosed). When it
// fails after its claim may have been created - even if etcd's reply was
// lost - it deletes the claim with a bounded context of its own, not ctx,
// which may have ended (see discard). Safe for concurrent use.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Claim, error) {
	if err := b.closed("acquire"); err != nil {
		return backend.Claim{}, err
	}
	// A Backend used directly, without the root package's checks, must
	// not store a claim its peers cannot read.
	if err := backend.CheckRequest(&req); err != nil {
		return backend.Claim{}, fmt.Errorf("etcd acquire %q: %w", req.Key, err)
	}
	switch {
	case req.Lease == 0:
		// A claim without a lease would never expire.
		return backend.Claim{}, fmt.Errorf("%w: etcd acquire: no lease", backend.ErrLeaseExpired)
	case ctx.Err() != nil:
		return backend.Claim{}, fmt.Errorf("etcd acquire: %w", backend.ContextError(ctx))
	}
	a := &acquisition{b: b, req: req, kind: backend.KindOf(&req), dir: b.layout.dir(req.Key)}
	switch {
	case len(req.Keys) > 1:
		a.dirs = make([]string, len(req.Keys))
		for i, k := range req.Keys {
			a.dirs[i] = b.layout.dir(k)
		}
		a.e = b.reg.addClaim(a.dirs, a.kind, req.Lease, req.OnLost)
	case a.kind == exclusive:
		a.e = b.reg.add(a.dir, req.Lease, req.OnLost)
	default:
		a.e = b.reg.addClaim([]string{a.dir}, a.kind, req.Lease, req.OnLost)
	}
	a.e.owner = req.Owner
	if a.kind.Counted() {
		a.permit = backend.NoPermit // until it picks one
	}
	if len(req.Value) > 0 {
		a.value = bytes.Clone(req.Value) // the Backend's copy
	}
	if req.Stamp != nil && a.dirs == nil {
		a.stampKey = b.layout.stamp(req.Key)
	}
	c, err := a.run(ctx)
	if err == nil && !b.reg.promote(a.e) {
		err = a.lostError()
	}
	if err != nil {
		b.reg.end(a.e)
		if !a.mayExist {
			b.reg.forget(a.e) // nothing was created under the name
			return backend.Claim{}, err
		}
		// Clean up before returning unless that could keep the caller
		// long past its deadline: etcd just failed to answer in time.
		now := ctx.Err() == nil || !errors.Is(err, backend.ErrUnavailable)
		b.discard(ctx, a.e, a.token, now)
		return backend.Claim{}, err
	}
	return c, nil
}

// acquisition is the state of one Acquire call.
type acquisition struct {
	b        *Backend
	req      backend.AcquireRequest
	kind     backend.Kind
	e        *entry   // e.key is the claim's etcd key (at req.Key)
	dir      string   // the queue directory of req.Key
	dirs     []string // a multi-key request's queue directories, one per key; else nil
	stampKey string   // "" unless a single-key request stamps (multi-key: see multistamp.go)
	value    []byte   // the Backend's copy of req.Value
	permit   int      // the permit held; backend.NoPermit while a counted claim has none

	mayExist   bool  // the claim may exist in etcd: remove it on failure
	token      int64 // create revision of the claim, once known
	acquiredAt time.Time
	prevStamp  []byte // stamp record read when the claim became holder; nil if none
	stampRev   int64  // its mod revision; 0 if none
}

func (a *acquisition) run(ctx context.Context) (backend.Claim, error) {
	var err error
	queued := a.req.Wait && a.req.Fair
	switch {
	case a.dirs != nil && queued:
		err = a.enqueueAll(ctx)
	case a.dirs != nil:
		err = a.whenAllFree(ctx)
	case a.kind.Shared && queued:
		err = a.enqueueShared(ctx)
	case a.kind.Shared:
		err = a.whenFreeShared(ctx)
	case a.kind.Counted() && queued:
		err = a.enqueueCounted(ctx)
	case a.kind.Counted():
		err = a.whenFreeCounted(ctx)
	case queued:
		err = a.enqueue(ctx)
	default:
		err = a.whenFree(ctx)
	}
	if err != nil {
		return backend.Claim{}, err
	}
	var st backend.Timestamp
	switch {
	case a.req.Stamp != nil && a.dirs != nil:
		st, err = a.stampAll(ctx)
	case a.req.Stamp != nil:
		st, err = a.stamp(ctx)
	}
	if err != nil {
		return backend.Claim{}, err
	}
	return backend.Claim{
		Key:        a.req.Key,
		Keys:       a.req.Keys,
		ID:         a.e.key[len(a.dir):],
		Lease:      a.req.Lease,
		Token:      uint64(a.token),
		AcquiredAt: a.acquiredAt,
		Stamp:      st,
		Shared:     a.kind.Shared,
		Permits:    a.kind.Permits,
		Permit:     max(a.permit, 0),
		Value:      a.value,
	}, nil
}

// enqueue is the fair path. One Txn: if the claim does not exist yet, read
// the newest claim of the queue (the one just ahead of us), then create
// ours. Uncontended, that is the whole acquisition.
//
// The claim can only exist already if a write under our name was applied
// by etcd after its sender stopped waiting for it: this Txn, resent after a
// lost reply, or an earlier acquisition's Txn that arrived after that
// acquisition's cleanup. Either way the claim is bound to our lease and
// has no other owner, so it is taken over (see found); that is rare
// enough to cost a second round trip rather than an Else branch in every
// enqueue.
func (a *acquisition) enqueue(ctx context.Context) error {
	now := time.Now()
	// Ops of a Txn run in order: this Get sees the queue before our Put.
	ahead := clientv3.OpGet(a.dir, newestKey...)
	resp, err := a.create(ctx, []clientv3.Cmp{a.absent()}, a.withStamp(ahead, a.put(now))...)
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		resp, err := a.b.cli.Txn(ctx).Then(a.withStamp(clientv3.OpGet(a.e.key), clientv3.OpGet(a.dir, oldestKey...))...).Commit()
		if err != nil {
			return rpcError(ctx, "acquire", err)
		}
		return a.found(ctx, resp, now)
	}
	a.setToken(resp.Header.Revision)
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return a.holds(now, resp) // the queue was empty: we hold the key
	}
	if !agrees(a.kind, string(kvs[0].Key)) {
		return a.mismatchError()
	}
	return a.waitInQueue(ctx, a.q(), string(kvs[0].Key), resp.Header.Revision)
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
		a.mayExist = true
		resp, err := a.b.cli.Txn(ctx).If(empty).
			Then(a.withStamp(a.put(now))...).
			Else(a.withStamp(clientv3.OpGet(a.e.key), clientv3.OpGet(a.dir, oldestKey...), clientv3.OpGet(a.dir, newestKey...))...).
			Commit()
		if err != nil {
			return rpcError(ctx, "acquire", err)
		}
		if resp.Succeeded {
			a.setToken(resp.Header.Revision)
			return a.holds(now, resp)
		}
		if len(rangeKvs(resp, 0)) > 0 {
			return a.found(ctx, resp, now) // a claim exists under our name (see enqueue)
		}
		a.mayExist = false
		newest := rangeKvs(resp, 2)
		if len(newest) > 0 && !agrees(a.kind, string(newest[0].Key)) {
			return a.mismatchError()
		}
		if !a.req.Wait {
			return a.lockedError()
		}
		if len(newest) == 0 {
			// The compare saw a claim that the read in the same Txn did
			// not: etcd broke its own atomicity. Looping would spin.
			return a.inconsistent()
		}
		if err := a.waitDeleted(ctx, string(newest[0].Key), resp.Header.Revision+1); err != nil {
			return err
		}
	}
}

// put creates the claim, bound to the request's lease.
func (a *acquisition) put(now time.Time) clientv3.Op {
	return a.putAt(a.e.key, a.record(now, backend.Timestamp{}))
}

// putAt creates the claim's key key with value v, bound to the lease.
func (a *acquisition) putAt(key, v string) clientv3.Op {
	return clientv3.OpPut(key, v, clientv3.WithLease(clientv3.LeaseID(a.req.Lease)))
}

// rewrite replaces the record at key of the claim, which exists.
func rewrite(key, v string) clientv3.Op {
	return clientv3.OpPut(key, v, clientv3.WithIgnoreLease())
}

// record is the claim's value with acquired-at now. A waiter rewrites it
// when it becomes the holder, so Inspect reports when the claim came to
// hold the key, not when it was queued.
func (a *acquisition) record(now time.Time, st backend.Timestamp) string {
	r := claimRecord{Owner: a.req.Owner, AcquiredAt: now, Stamp: st, Permit: a.permit, Value: a.value}
	if a.kind != exclusive {
		r.Shared, r.Permits = a.kind.Shared, a.kind.Permits
	}
	return encodeClaim(r)
}

// queueKey is one key of a claim: its queue directory and the claim's etcd
// key in it.
type queueKey struct{ dir, key string }

// q is the queue key of a single-key claim, or of a multi-key claim's
// first key.
func (a *acquisition) q() queueKey { return queueKey{a.dir, a.e.key} }

// withStamp appends a read of the stamp record when the request stamps; it
// is always the Txn's last operation (see keepStamp).
func (a *acquisition) withStamp(ops ...clientv3.Op) []clientv3.Op {
	if a.stampKey != "" {
		ops = append(ops, clientv3.OpGet(a.stampKey))
	}
	return ops
}

// holds records that the claim came to hold its key(s) at now, by the Txn
// that answered resp, and keeps the stamp record that Txn read, if any.
func (a *acquisition) holds(now time.Time, resp *clientv3.TxnResponse) error {
	a.acquiredAt = now
	a.keepStamp(resp)
	return nil
}

// absent holds while no claim is under the claim's name at req.Key.
func (a *acquisition) absent() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(a.e.key), "=", 0)
}

// create sends the Txn that enqueues the claim: if notYet holds (its name
// is absent), run ops. While etcd is merely out of reach it is sent again
// (see send): tried again, the Txn finds the claim if a lost attempt
// made it, and the caller takes that claim over.
func (a *acquisition) create(ctx context.Context, notYet []clientv3.Cmp, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	a.mayExist = true
	return a.send(ctx, func(txn clientv3.Txn) clientv3.Txn { return txn.If(notYet...).Then(ops...) })
}

// keepStamp remembers the stamp record read by withStamp, if any.
func (a *acquisition) keepStamp(resp *clientv3.TxnResponse) {
	if a.stampKey == "" {
		return
	}
	if kvs := rangeKvs(resp, len(resp.Responses)-1); len(kvs) > 0 {
		a.prevStamp, a.stampRev = kvs[0].Value, kvs[0].ModRevision
	}
}

// setToken records the claim's create revision.
func (a *acquisition) setToken(token int64) {
	a.token = token
	a.b.reg.setToken(a.e, token)
}

// recordedAt returns the acquired-at stored in a claim value, or def if the
// value cannot be read.
func recordedAt(v []byte, def time.Time) time.Time {
	if r, err := decodeClaim(v); err == nil && !r.AcquiredAt.IsZero() {
		return r.AcquiredAt
	}
	return def
}

// rangeKvs returns what the i-th read of resp found.
func rangeKvs(resp *clientv3.TxnResponse, i int) []*mvccpb.KeyValue {
	if i < 0 || i >= len(resp.Responses) {
		return nil
	}
	return resp.Responses[i].GetResponseRange().GetKvs()
}

func (a *acquisition) lostError() error {
	return fmt.Errorf("%w: etcd acquire %q: claim %s vanished (lease ended or deleted)",
		backend.ErrLeaseExpired, a.req.Key, a.e.key)
}

func (a *acquisition) mismatchError() error {
	return fmt.Errorf("etcd acquire %q (%d permits): %w", a.req.Key, a.kind.Permits, backend.ErrPermitMismatch)
}

func (a *acquisition) lockedError() error {
	return fmt.Errorf("etcd acquire %q: %w", a.req.Key, backend.ErrLocked)
}

// inconsistent reports a Txn whose compares and reads disagree, which etcd's
// atomic Txns rule out; returning beats retrying in a tight loop.
func (a *acquisition) inconsistent() error {
	return fmt.Errorf("%w: etcd acquire %q: inconsistent Txn response", backend.ErrUnavailable, a.req.Key)
}
