package etcd

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Acquire creates a claim on req.Key (on every key of req.Keys), bound to
// lease req.Lease, and returns it once it holds every key. The claim is
// named after its lease and kind (see the package documentation);
// Claim.ID is that name, and req.ID is not used. The protocol is told in
// the package documentation: uncontended, a fair Acquire, a TryAcquire
// and a Release are one round trip each, whatever the kind and number of
// keys; stamps cost one more.
//
// Acquire blocks until the claim holds, ctx ends, the claim vanishes (its
// lease ended or it was deleted: ErrLeaseExpired), etcd fails
// (ErrUnavailable) or the Backend is closed (ErrClosed). When it fails
// after its claim may have been created - even if etcd's reply was lost -
// it deletes the claim with a bounded context of its own, not ctx, which
// may have ended (see discard). Safe for concurrent use.
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
	a := &acquisition{b: b, req: req, kind: backend.KindOf(&req), dirs: make([]string, len(req.AllKeys()))}
	for i, k := range req.AllKeys() {
		a.dirs[i] = b.layout.dir(k)
	}
	a.e = b.reg.add(a.dirs, a.kind, req.Lease, req.OnLost)
	a.e.owner = req.Owner
	if a.kind.Counted() {
		a.permit = backend.NoPermit // until it picks one
	}
	if len(req.Value) > 0 {
		a.value = bytes.Clone(req.Value) // the Backend's copy
	}
	if req.Stamp != nil && len(a.dirs) == 1 {
		a.stampKey = b.layout.stamp(req.Key)
	}
	c, err := a.run(ctx)
	if err == nil && !b.reg.promote(a.e) {
		err = a.lostError()
	}
	if err == nil {
		return c, nil
	}
	b.reg.end(a.e)
	if !a.mayExist {
		b.reg.forget(a.e) // nothing was created under the name
	} else {
		// Clean up before returning unless that could keep the caller
		// long past its deadline: etcd just failed to answer in time.
		b.discard(ctx, a.e, a.e.token, ctx.Err() == nil || !errors.Is(err, backend.ErrUnavailable))
	}
	return backend.Claim{}, err
}

// acquisition is the state of one Acquire call.
type acquisition struct {
	b        *Backend
	req      backend.AcquireRequest
	kind     backend.Kind
	e        *entry   // its etcd keys: e.keys[i] in the queue directory dirs[i]
	dirs     []string // the queue directory of each of its keys, req.Key's first
	stampKey string   // "" unless a single-key request stamps (see stamp)
	value    []byte   // the Backend's copy of req.Value
	permit   int      // the permit held; backend.NoPermit while a counted claim has none

	mayExist   bool // the claim may exist in etcd: remove it on failure
	acquiredAt time.Time
	prevStamp  []*mvccpb.KeyValue // the read of the stamp record when the claim became holder
}

func (a *acquisition) run(ctx context.Context) (backend.Claim, error) {
	enter := a.whenFree // a request that does not queue
	if a.req.Wait && a.req.Fair {
		enter = a.enqueue
	}
	st, err := backend.Timestamp{}, enter(ctx)
	if err == nil && a.req.Stamp != nil {
		st, err = a.stamp(ctx)
	}
	if err != nil {
		return backend.Claim{}, err
	}
	return backend.Claim{
		Key:        a.req.Key,
		Keys:       a.req.Keys,
		ID:         a.e.key[len(a.dirs[0]):],
		Lease:      a.req.Lease,
		Token:      uint64(a.e.token),
		AcquiredAt: a.acquiredAt,
		Stamp:      st,
		Shared:     a.kind.Shared,
		Permits:    a.kind.Permits,
		Permit:     max(a.permit, 0),
		Value:      a.value,
	}, nil
}

// enqueue is the fair path. One Txn creates the claim at every key, if its
// name is absent at all of them, and reads at each the newest claim that
// blocks it there (kind.go): Ops of a Txn run in order, so the reads see
// the queues before our puts. Where a read finds nothing the claim holds
// at once; uncontended, that Txn is the whole acquisition (a counted
// claim's put is a nested Txn that records permit 0 when the queue was
// empty). The claim then waits at the other keys, one at a time (waitAt;
// a counted claim, waitCounted); a multi-key claim that waited checks at
// the end that it still exists at every key. That cannot
// deadlock: at every key a claim only waits for claims with a lower token,
// whatever the order in which requests list their keys.
//
// A claim found under our name instead is taken over (adopt.go).
func (a *acquisition) enqueue(ctx context.Context) error {
	now := time.Now()
	n := len(a.dirs)
	cmps := make([]clientv3.Cmp, n, n+1) // our name absent at every key (and the fence: creating); at the end, our identity
	room := 2 * n
	if a.stampKey != "" {
		room++ // withStamp's read
	}
	ops := make([]clientv3.Op, 2*n, room)
	rec := a.record(now, backend.Timestamp{})
	for i, dir := range a.dirs {
		cmps[i] = absent(a.e.keys[i])
		ops[i] = aheadOf(a.kind, dir, 0)
		ops[n+i] = a.putAt(a.e.keys[i], rec)
	}
	if a.kind.Counted() { // one key
		a.permit = 0
		alone := a.putAt(a.e.key, a.record(now, backend.Timestamp{}))
		a.permit = backend.NoPermit
		ops[1] = clientv3.OpTxn([]clientv3.Cmp{freeOf(a.kind, a.dirs[0])}, []clientv3.Op{alone}, []clientv3.Op{ops[1]})
	}
	resp, found, err := a.create(ctx, cmps, a.withStamp(ops...)...)
	if err != nil {
		return err
	}
	if resp.Succeeded {
		a.b.reg.setToken(a.e, resp.Header.Revision)
	}
	switch {
	case !resp.Succeeded:
		err = a.adopt(ctx, found)
	case a.kind.Counted() && resp.Responses[1].GetResponseTxn().GetSucceeded():
		a.permit = 0
		return a.holds(now, resp)
	default:
		_, err = a.firstAhead(resp)
	}
	if err != nil {
		return err
	}
	if a.kind.Counted() {
		return a.waitCounted(ctx)
	}
	a.holds(now, resp)
	waited := false
	for i := range a.dirs {
		pred := "" // a claim taken over looks up what is ahead of it first
		if resp.Succeeded {
			kvs := rangeKvs(resp, i)
			if len(kvs) == 0 {
				continue // held there since the enqueue
			}
			pred = string(kvs[0].Key)
		}
		waited = true
		if err := a.waitAt(ctx, i, pred, resp.Header.Revision); err != nil {
			return err
		}
	}
	if !waited || n == 1 || a.req.Stamp != nil {
		// With stamps, stamp's Txn compares the claim's identity at
		// every key and makes the check below.
		return nil
	}
	// Each wait checked the claim only at the key it waited at, so an
	// operator may have deleted it meanwhile at a key it held before, and
	// another claim may hold that key now; the Acquire must then fail
	// (ErrLeaseExpired, and its cleanup removes the rest), not hold beside
	// that claim. Once the claim exists at every key at one revision it
	// holds them all: it was admitted at each, and later claims only queue
	// behind it. One Txn checks that, tried again while etcd cannot be
	// reached (see send).
	for i, key := range a.e.keys {
		cmps[i] = incarnation(key, a.e.token)
	}
	_, err = a.guarded(ctx, cmps, func() []clientv3.Op { return nil })
	return err
}

// firstAhead checks that the claim just ahead of ours at each key, as the
// first reads of resp found it (aheadOf, newest first), agrees on the
// permit count (agrees), and returns the first of them ("" if none).
func (a *acquisition) firstAhead(resp *clientv3.TxnResponse) (string, error) {
	first := ""
	for i := range a.dirs {
		if kvs := rangeKvs(resp, i); len(kvs) > 0 {
			if !agrees(a.kind, string(kvs[0].Key)) {
				return "", fmt.Errorf("etcd acquire %q (%d permits): %w", a.req.Key, a.kind.Permits, backend.ErrPermitMismatch)
			}
			first = cmp.Or(first, string(kvs[0].Key))
		}
	}
	return first, nil
}

// whenFree is the path of requests that take no place in the queue: one
// Txn creates the claim at every key only if a claim made now would hold
// every key at once (freeOf). With Wait false that is the whole story;
// with Fair false, Acquire otherwise waits for what blocks it to go and
// tries again.
//
// A non-queued request can only win when no fair request blocks it, so
// queued requests always go first and both kinds exclude each other (the
// claim it creates heads the same queues). It trades fairness for not
// being in anyone's way: it can starve under a steady stream of fair
// requests, and when a key frees every non-queued waiter of it wakes and
// races (the losers go back to waiting).
//
// When its compares fail the Txn reads what blocks it and its own name at
// every key (and for a counted claim the lease's fence), in its Else branch
// unless the Txn would then exceed maxTxnBytes (long keys and a large
// value): it is then sent without them, and they follow in a Txn of their
// own. A claim found under our name is a stray, removed before trying
// again (adopt.go).
//
// A counted claim (one key) made now would hold if fewer than n claims
// are queued and all of them have recorded their permits. The first Txn
// creates it with permit 0 if the queue is empty, else reads up to n
// claims, newest first; if they leave room, the next Txn creates it with
// the lowest free permit (countedNext), on condition that no claim was
// created meanwhile (claims only join at the newest end, so the queue is
// then a subset of what was read).
func (a *acquisition) whenFree(ctx context.Context) error {
	n := len(a.dirs)
	var picked []clientv3.Cmp // a counted claim's compares once it picked a permit; nil: the queues free
	races := 0
	a.permit = 0 // a claim made here holds at once: a counted one with a permit
	for {
		now := time.Now()
		rec := a.record(now, backend.Timestamp{})
		free := picked
		puts, reads := make([]clientv3.Op, n), make([]clientv3.Op, 2*n, 2*n+1)
		for i, dir := range a.dirs {
			if picked == nil {
				free = append(free, freeOf(a.kind, dir))
			}
			puts[i] = a.putAt(a.e.keys[i], rec)
			reads[i] = aheadOf(a.kind, dir, 0)
			switch {
			case a.kind.Shared:
				// Our own name is outside the range freeOf covers: a
				// claim under it is found by the put (see strays).
				puts[i] = a.putAt(a.e.keys[i], rec, clientv3.WithPrevKV())
			case a.kind.Counted():
				// The claims that may hold, with their records (permits).
				reads[i] = clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithLimit(int64(a.kind.Permits)),
					clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))
			}
			reads[n+i] = clientv3.OpGet(a.e.keys[i], clientv3.WithKeysOnly())
		}
		if a.kind.Counted() {
			reads = append(reads, a.fenceRead()) // its failures are told apart by the reads alone
		}
		els := fitting(free, puts, reads) // nil: the reads follow in a Txn of their own
		txn, seen := a.creating(a.b.cli.Txn(ctx), free, a.withStamp(puts...), els)
		a.mayExist = true
		resp, err := txn.Commit()
		if err != nil {
			return rpcError(ctx, "acquire", err)
		}
		made := resp.Succeeded // not the reads' Txn below, which has no compares
		if !made && els == nil {
			if resp, err = a.b.cli.Txn(ctx).Then(reads...).Commit(); err != nil {
				return rpcError(ctx, "acquire", err)
			}
		}
		if del := a.strays(resp, made); del != nil {
			// Each delete is compared on the create revision found, so
			// that, applied late, it removes no later claim.
			if _, err := a.b.cli.Txn(ctx).Then(del...).Commit(); err != nil {
				return rpcError(ctx, "acquire", err)
			}
			picked, a.permit = nil, 0
			continue
		}
		if made {
			a.b.reg.setToken(a.e, resp.Header.Revision)
			return a.holds(now, resp)
		}
		a.mayExist = false
		blocker, err := a.firstAhead(resp)
		if err != nil {
			return err
		}
		var wait []string // what to wait for
		p, rewrites := 0, false
		switch {
		case a.kind.Counted():
			if p, wait, rewrites, err = a.countedNext(rangeKvs(resp, 0)); err != nil {
				return err
			}
		case blocker != "":
			wait = []string{blocker}
		}
		if wait == nil {
			// Nothing blocks: the fence moved, a counted claim has room
			// (permit p), or the blockers went between the Txn and the
			// reads, which an inline read rules out.
			fr := resp
			if !a.kind.Counted() {
				if fr, err = a.b.cli.Txn(ctx).Then(a.fenceRead()).Commit(); err != nil {
					return rpcError(ctx, "acquire", err)
				}
			}
			switch {
			case a.refenced(fr, seen):
				continue
			case a.kind.Counted():
				if races++; races > 3 && !a.req.Wait {
					return fmt.Errorf("etcd acquire %q: %w", a.req.Key, backend.ErrLocked) // the queue keeps changing under us
				}
				// The reads saw every claim (fewer than n), all created at
				// or before the revision they were made at.
				a.permit = p
				picked = []clientv3.Cmp{absent(a.e.key), clientv3.Compare(clientv3.CreateRevision(a.dirs[0]), "<", resp.Header.Revision+1).WithPrefix()}
				continue
			case els != nil:
				return a.inconsistent() // the compares saw a claim that the reads did not
			}
		}
		switch {
		case !a.req.Wait:
			return fmt.Errorf("etcd acquire %q: %w", a.req.Key, backend.ErrLocked)
		case wait == nil:
			continue
		}
		if err := a.waitAny(ctx, wait, resp.Header.Revision+1, rewrites); err != nil {
			return err
		}
		picked, a.permit = nil, 0
	}
}

// putAt creates the claim's key key with value v, bound to the lease.
func (a *acquisition) putAt(key, v string, opts ...clientv3.OpOption) clientv3.Op {
	if len(opts) == 0 { // the common case, without a slice grown on the heap
		return clientv3.OpPut(key, v, clientv3.WithLease(clientv3.LeaseID(a.req.Lease)))
	}
	return clientv3.OpPut(key, v, append(opts, clientv3.WithLease(clientv3.LeaseID(a.req.Lease)))...)
}

// rewrite replaces the record at key of the claim, which exists.
func rewrite(key, v string) clientv3.Op {
	return clientv3.OpPut(key, v, clientv3.WithIgnoreLease())
}

// record is the claim's value with acquired-at now. A waiter rewrites it
// when it becomes the holder, so Inspect reports when the claim came to
// hold the key, not when it was queued.
func (a *acquisition) record(now time.Time, st backend.Timestamp) string {
	return encodeClaim(claimRecord{Owner: a.req.Owner, AcquiredAt: now, Stamp: st, Permit: a.permit, Value: a.value})
}

// withStamp appends a read of the stamp record when the request stamps; it
// is always the Txn's last operation (see holds).
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
	if a.stampKey != "" {
		a.prevStamp = rangeKvs(resp, len(resp.Responses)-1)
	}
	return nil
}

// absent holds while no claim is under the etcd key key.
func absent(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
}

// create sends the Txn that enqueues the claim: if notYet holds (its name
// is absent) and the lease's fence has not moved (fence.go), run ops.
// While etcd is merely out of reach it is sent again (see send): tried
// again, the Txn finds the claim if a lost try made it, and the caller
// takes that claim over; the fence is then moved, so that the lost try,
// applied after the claim's release, makes nothing.
//
// When the Txn fails, found is what a second one read under our name at
// every key (for adopt) and, last, the fence. The Txn carries no Else
// branch: it fails rarely, and the uncontended cycle would pay for that
// branch on every request. The fence cannot move back, so a fence read
// after the Txn that was put after seen was put after seen when the Txn
// ran, or since; either way sending the Txn again is right.
func (a *acquisition) create(ctx context.Context, notYet []clientv3.Cmp, ops ...clientv3.Op) (resp, found *clientv3.TxnResponse, err error) {
	a.mayExist = true
	unsure := false
	for {
		var seen int64
		tries := 0
		resp, err = a.send(ctx, func(txn clientv3.Txn) clientv3.Txn {
			tries++
			unsure = unsure || tries > 1
			txn, seen = a.creating(txn, notYet, ops, nil)
			return txn
		})
		if err != nil {
			return nil, nil, err
		}
		if !resp.Succeeded {
			reads := make([]clientv3.Op, len(a.e.keys), len(a.e.keys)+1)
			for i, key := range a.e.keys {
				// Not keys-only: etcd leaves the lease out of keys-only replies.
				reads[i] = clientv3.OpGet(key)
			}
			if found, err = a.b.cli.Txn(ctx).Then(append(reads, a.fenceRead())...).Commit(); err != nil {
				return nil, nil, rpcError(ctx, "acquire", err)
			}
			if a.refenced(found, seen) {
				continue
			}
		}
		if unsure {
			if err := a.b.fenceDelete(ctx, a.req.Lease); err != nil {
				return nil, nil, rpcError(ctx, "acquire", err)
			}
		}
		return resp, found, nil
	}
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

// inconsistent reports a Txn whose compares and reads disagree, which etcd's
// atomic Txns rule out; returning beats retrying in a tight loop.
func (a *acquisition) inconsistent() error {
	return fmt.Errorf("%w: etcd acquire %q: inconsistent Txn response", backend.ErrUnavailable, a.req.Key)
}
