package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Multi-key claims (AcquireRequest.Keys). One Txn creates the claim, under
// the same name, in every key's queue, so all its keys get one create
// revision: the token. The claim holds once it holds at every key, and it
// waits at one key at a time; that cannot deadlock, since at every key a
// claim only ever waits for claims with a lower token, whatever the order
// in which requests list their keys. A claim that waited checks at the end
// that it still exists at every key (see confirmAll).
//
// etcd limits the longest of a Txn's lists (compares, success ops, failure
// ops) to --max-txn-ops, 128 by default, and a nested Txn's to what the
// outer one leaves of it; with at most backend.MaxKeys (64) keys every Txn
// below stays within that:
//
//	enqueue:  If(own name absent per key) Then(Get ahead per key, Put per key)
//	try:      If(queue free per key [shared: and own name absent per key]) Then(Put per key)
//	          Else(Get the blocking claim per key, Get own name per key),
//	          or those reads in a Txn of their own after it failed (see maxTxnBytes)
//	confirm:  If(identity per key), after waiting, unless stamps (whose Txn compares the same)
//	release:  Then(Delete per key), or Then(Txn If(identity) Then(Delete) per key)
//	stamps:   Then(Get stamp per key); then If(identity, stamp unchanged per key)
//	          Then(Put stamp, Put record per key), and after it failed
//	          Then(Get stamp, Get claim per key)
//	SetValue: If(identity per key) Then(Put record per key)
//
// so that uncontended a multi-key claim takes one round trip to make
// (three with stamps: the stamp records are read and written in Txns of
// their own, since with the enqueue's reads and puts they would not fit)
// and one to release, whatever the number of keys.
//
// etcd also refuses requests over --max-request-bytes, 1.5 MiB by default.
// The largest of these Txns, with backend.MaxKeys keys of the longest
// length, each byte of which escapeKey expands to three, the longest
// prefix and owner label, and a value of backend.MaxValueTotal bytes in
// all, are the enqueue, the try without its reads and the stamps' write;
// each names every key's etcd key about four times and carries the value
// once, and stays within the default limit.

// multiOps builds the per-key parts of the Txns that make a multi-key
// claim: the compares that say every queue is free for it, the compares
// that its name is absent everywhere, the reads of what is ahead of it (or
// blocks it) at each key, and the puts that create it.
func (a *acquisition) multiOps(now time.Time) (free, notYet []clientv3.Cmp, ahead, puts []clientv3.Op) {
	keys := a.e.keys
	rec := a.record(now, backend.Timestamp{})
	for i, dir := range a.dirs {
		absent := clientv3.Compare(clientv3.CreateRevision(keys[i]), "=", 0)
		notYet = append(notYet, absent)
		puts = append(puts, a.putAt(keys[i], rec))
		if a.kind.Shared {
			free = append(free, noNonShared(dir), absent)
			ahead = append(ahead, olderNonShared(dir, 0))
		} else {
			free = append(free, noClaim(dir)) // implies our name is absent
			ahead = append(ahead, clientv3.OpGet(dir, newestKey...))
		}
	}
	return free, notYet, ahead, puts
}

// enqueueAll is the fair path of a multi-key claim: one Txn creates the
// claim at every key if its name is absent everywhere and reads, per key,
// the claim it would wait for; it holds at once where that read finds
// none, and waits at the other keys one at a time. If it waited, it then
// confirms that it still exists at every key.
func (a *acquisition) enqueueAll(ctx context.Context) error {
	now := time.Now()
	_, notYet, ahead, puts := a.multiOps(now)
	resp, err := a.create(ctx, notYet, append(ahead[:len(ahead):len(ahead)], puts...)...)
	if err != nil {
		return err
	}
	// At key i the claim waits behind preds[i] if wait[i] ("" to look
	// it up first).
	preds, wait := make([]string, len(a.dirs)), make([]bool, len(a.dirs))
	rev := resp.Header.Revision
	if resp.Succeeded {
		a.setToken(rev)
		for i := range a.dirs {
			if kvs := rangeKvs(resp, i); len(kvs) > 0 {
				preds[i], wait[i] = string(kvs[0].Key), true
				if !agrees(a.kind, preds[i]) {
					return a.mismatchError()
				}
			}
		}
	} else {
		// Our name exists at some key: a resent enqueue whose first try
		// was applied (see enqueue). Take it over; check every key.
		if err := a.adoptAll(ctx); err != nil {
			return err
		}
		for i := range wait {
			wait[i] = true
		}
	}
	a.acquiredAt = now
	waited := false
	for i, dir := range a.dirs {
		if !wait[i] {
			continue // held there since the enqueue
		}
		waited = true
		q := queueKey{dir, a.e.keys[i]}
		var err error
		if a.kind.Shared {
			err = a.waitShared(ctx, q, preds[i], rev)
		} else {
			err = a.waitInQueue(ctx, q, preds[i], rev)
		}
		if err != nil {
			return err
		}
	}
	if waited && a.req.Stamp == nil {
		// With stamps, stampAll's Txn compares the claim's identity at
		// every key and makes this check.
		return a.confirmAll(ctx)
	}
	return nil
}

// confirmAll checks, in one Txn, that the claim still exists at every key.
// Each wait checked the claim only at the key it waited at, so an operator
// may have deleted it meanwhile at a key it held before, and another claim
// may hold that key now; the Acquire must then fail (ErrLeaseExpired, and
// its cleanup removes the rest), not hold beside that claim. Once the
// claim exists at every key at one revision it holds them all: it was
// admitted at each, and later claims only queue behind it. While etcd
// cannot be reached it tries again (see retryAfter).
func (a *acquisition) confirmAll(ctx context.Context) error {
	cmps := make([]clientv3.Cmp, len(a.e.keys))
	for i, k := range a.e.keys {
		cmps[i] = incarnation(k, a.token)
	}
	_, err := a.guarded(ctx, cmps, func() []clientv3.Op { return nil })
	return err
}

// adoptAll takes over a multi-key claim found under our name: it is ours
// if it exists at every key, bound to our lease, with one create revision.
func (a *acquisition) adoptAll(ctx context.Context) error {
	ops := make([]clientv3.Op, len(a.e.keys))
	for i, k := range a.e.keys {
		ops[i] = clientv3.OpGet(k) // with its lease (see adopt)
	}
	resp, err := a.b.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return rpcError(ctx, "acquire", err)
	}
	var token int64
	for i := range ops {
		kvs := rangeKvs(resp, i)
		if len(kvs) == 0 {
			return a.lostError()
		}
		if kvs[0].Lease != int64(a.req.Lease) || (token != 0 && kvs[0].CreateRevision != token) {
			return fmt.Errorf("%w: etcd acquire %q: claims under %s are not one claim of ours",
				backend.ErrUnavailable, a.req.Key, a.e.key)
		}
		token = kvs[0].CreateRevision
	}
	a.setToken(token)
	return a.agreesAhead(ctx)
}

// whenAllFree is the path of multi-key requests that do not queue: one Txn
// creates the claim at every key only if a claim made now would hold every
// key at once; otherwise it reads what blocks it at each key, and with
// Fair false waits for the first such claim to go and tries again.
//
// The Txn also reads our own name at every key. A claim found under it is
// a stray (see enqueue): an earlier acquisition's write applied after that
// acquisition gave up. It is removed, by name, and the Txn sent again;
// taken for a blocker it would keep a TryAcquire out, and a waiting
// request would wait for it, bound to our own live lease, until ctx ends.
//
// The reads go in the Txn's Else branch unless the Txn would then exceed
// maxTxnBytes (long keys and a large value); it is then sent without them,
// and they follow in a Txn of their own when its compares fail.
func (a *acquisition) whenAllFree(ctx context.Context) error {
	for {
		now := time.Now()
		free, _, ahead, puts := a.multiOps(now)
		reads := ahead
		for _, k := range a.e.keys {
			reads = append(reads, clientv3.OpGet(k, clientv3.WithKeysOnly()))
		}
		txn := a.b.cli.Txn(ctx).If(free...).Then(puts...)
		inline := txnBytes(free, puts, reads) <= maxTxnBytes
		if inline {
			txn = txn.Else(reads...)
		}
		a.mayExist = true
		resp, err := txn.Commit()
		if err != nil {
			return rpcError(ctx, "acquire", err)
		}
		if resp.Succeeded {
			a.setToken(resp.Header.Revision)
			a.acquiredAt = now
			return nil
		}
		if !inline {
			if resp, err = a.b.cli.Txn(ctx).Then(reads...).Commit(); err != nil {
				return rpcError(ctx, "acquire", err)
			}
		}
		if a.strayFound(resp) {
			// The name is lent to this acquisition alone, so the delete
			// removes no one's claim (see deleteClaim).
			if _, err := a.b.deleteClaims(ctx, a.e.keys, 0); err != nil {
				return rpcError(ctx, "acquire", err)
			}
			continue
		}
		blocker := ""
		for i := range a.dirs {
			kvs := rangeKvs(resp, i)
			if len(kvs) == 0 {
				continue
			}
			if !agrees(a.kind, string(kvs[0].Key)) {
				a.mayExist = false
				return a.mismatchError()
			}
			if blocker == "" {
				blocker = string(kvs[0].Key)
			}
		}
		a.mayExist = false
		switch {
		case blocker == "" && inline:
			return a.inconsistent() // the compares saw a claim that the reads did not
		case !a.req.Wait:
			return a.lockedError()
		case blocker == "":
			continue // the blockers went between the Txn and the reads
		}
		if err := a.waitDeleted(ctx, blocker, resp.Header.Revision+1); err != nil {
			return err
		}
	}
}

// strayFound reports whether whenAllFree's Txn, answered by resp, found a
// claim under our name at some key.
func (a *acquisition) strayFound(resp *clientv3.TxnResponse) bool {
	for i := range a.e.keys {
		if len(rangeKvs(resp, len(a.e.keys)+i)) > 0 {
			return true
		}
	}
	return false
}

// stampAll stamps a multi-key acquisition: one Txn reads every key's stamp
// record, Stamp is called with the highest, and one Txn guarded by the
// claim's identity at every key records the new stamp at every key where
// it is higher (see stamp: the records only ever rise).
func (a *acquisition) stampAll(ctx context.Context) (backend.Timestamp, error) {
	keys := a.e.keys
	stampKeys := make([]string, len(keys))
	reads := make([]clientv3.Op, len(keys), 2*len(keys))
	for i, k := range a.req.Keys {
		stampKeys[i] = a.b.layout.stamp(k)
		reads[i] = clientv3.OpGet(stampKeys[i])
	}
	resp, err := a.b.cli.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return backend.Timestamp{}, rpcError(ctx, "acquire (stamp)", err)
	}
	var prev backend.Timestamp
	for i := range keys {
		if kvs := rangeKvs(resp, i); len(kvs) > 0 {
			p, err := decodeStamp(kvs[0].Value)
			if err != nil {
				return backend.Timestamp{}, fmt.Errorf("etcd acquire %q: stamp record: %w", a.req.Keys[i], err)
			}
			if prev.Less(p) {
				prev = p
			}
		}
	}
	st, err := a.req.Stamp(prev)
	if err != nil {
		return backend.Timestamp{}, err
	}
	revs, raise := make([]int64, len(keys)), make([]bool, len(keys))
	for i := range keys {
		if revs[i], raise[i], err = higher(rangeKvs(resp, i), st); err != nil {
			return backend.Timestamp{}, fmt.Errorf("etcd acquire %q: stamp record: %w", a.req.Keys[i], err)
		}
	}
	rec := a.record(a.acquiredAt, st)
	for _, k := range keys {
		reads = append(reads, clientv3.OpGet(k, clientv3.WithKeysOnly()))
	}
	for {
		cmps := make([]clientv3.Cmp, 0, 2*len(keys))
		writes := make([]clientv3.Op, 0, 2*len(keys))
		for i, k := range keys {
			cmps = append(cmps, incarnation(k, a.token))
			writes = append(writes, rewrite(k, rec))
			if raise[i] {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(stampKeys[i]), "=", revs[i]))
				writes = append(writes, clientv3.OpPut(stampKeys[i], encodeStamp(st)))
			}
		}
		// No Else branch: with the longest keys and the largest value the
		// Txn would not fit with the reads (see maxTxnBytes), and they are
		// needed only when a shared holder recorded its stamp meanwhile.
		resp, err := a.b.cli.Txn(ctx).If(cmps...).Then(writes...).Commit()
		if err != nil {
			return backend.Timestamp{}, rpcError(ctx, "acquire (stamp)", err)
		}
		if resp.Succeeded {
			return st, nil
		}
		if resp, err = a.b.cli.Txn(ctx).Then(reads...).Commit(); err != nil {
			return backend.Timestamp{}, rpcError(ctx, "acquire (stamp)", err)
		}
		for i := range keys {
			if own := rangeKvs(resp, len(keys)+i); len(own) == 0 || own[0].CreateRevision != a.token {
				return backend.Timestamp{}, a.lostError()
			}
		}
		for i := range keys {
			if revs[i], raise[i], err = higher(rangeKvs(resp, i), st); err != nil {
				return backend.Timestamp{}, fmt.Errorf("etcd acquire %q: stamp record: %w", a.req.Keys[i], err)
			}
		}
	}
}

// maxTxnBytes bounds the size of a multi-key Txn that carries reads besides
// its compares and writes. etcd refuses requests over its
// --max-request-bytes, 1.5 MiB by default; with backend.MaxKeys keys of the
// longest length, made of bytes that escapeKey expands, and a value of
// backend.MaxValueTotal bytes in all, the compares and writes alone take
// most of that. A Txn that would exceed maxTxnBytes with its reads leaves
// them out and reads in a request of its own when it needs them.
const maxTxnBytes = 1 << 20

// txnBytes estimates the size of a Txn of cmps and ops as etcd receives
// it: the bytes of every key, range end and value, and a bound on the
// framing of each item.
func txnBytes(cmps []clientv3.Cmp, ops ...[]clientv3.Op) int {
	const framing = 32
	n := 0
	for i := range cmps {
		c := cmps[i].GetCompare()
		n += len(c.GetKey()) + len(c.GetRangeEnd()) + framing
	}
	for _, list := range ops {
		for _, op := range list {
			n += len(op.KeyBytes()) + len(op.RangeBytes()) + len(op.ValueBytes()) + framing
		}
	}
	return n
}
