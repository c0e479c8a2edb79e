package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Release deletes claim c in one request, at every key of a multi-key
// claim. It never deletes another claim -
// not a later claim under the same name, not the next holder - so a
// retried or late Release is harmless: the delete compares on the claim's
// identity (key + create revision, c.Token), or, for the claim the Backend
// handed out and still has as held, goes by its name, which no other claim
// can have meanwhile. A claim already gone gives nil.
//
// OnLost is not called for c once Release has been called, whatever its
// outcome. Release blocks for one round trip; failures wrap
// backend.ErrUnavailable (joined with ctx.Err() if ctx ended first); a
// later Release of c may be tried, and the claim's name stays taken until
// c's lease ends, since the failed delete may still be applied. Safe for
// concurrent use.
func (b *Backend) Release(ctx context.Context, c backend.Claim) error {
	if err := b.closed("release"); err != nil {
		return err
	}
	key := b.ClaimKey(c)
	// The release of a claim the registry still has as held ends its
	// entry before the delete is sent, so that the delete is not taken for
	// a loss. Its name is then this claim's alone until the entry is
	// forgotten, so a delete by name removes this claim, or, if it has
	// gone, a stray of an abandoned acquisition that is no one's: as safe
	// as the Txn, and cheaper. That holds only if the claim was not lost
	// before end (see registry.end).
	if e := b.reg.held(key, int64(c.Token)); e != nil && b.reg.end(e) {
		if _, err := b.deleteClaim(ctx, e.allKeys(), 0); err != nil {
			b.reg.keepName(e) // the delete may yet be applied, late
			return rpcError(ctx, "release", err)
		}
		b.reg.forget(e) // deleted now or gone already: the name is free
		return nil
	}
	// A release the registry cannot vouch for (lost, late, retried after
	// the entry went, misaddressed) compares on the token; token 0 names
	// no claim.
	if c.Token == 0 {
		return nil
	}
	_, err := b.deleteClaim(ctx, b.claimKeys(c), int64(c.Token))
	return rpcError(ctx, "release", err)
}

// deleteClaim removes a claim at its etcd keys, one per key it holds, in
// one request: the incarnation created at revision token, or, with token
// 0 (the release of a claim still registered, or a failed Acquire that
// never learnt its create revision), whatever is under the name. The name
// alone is safe then: it stays registered to that claim until this delete
// succeeds, so no other claim of this Backend can be under it, and claims
// of other Backends are under other leases' names. Each key of a
// multi-key claim is compared with a nested Txn of its own, so that a key
// where the claim is already gone (an operator deleted it there) does not
// keep it at the others. It returns the revision etcd answered at.
func (b *Backend) deleteClaim(ctx context.Context, keys []string, token int64) (int64, error) {
	switch {
	case len(keys) == 1 && token == 0:
		resp, err := b.cli.Delete(ctx, keys[0])
		if err != nil {
			return 0, err
		}
		return resp.Header.Revision, nil
	case len(keys) == 1:
		return b.commit(b.cli.Txn(ctx).If(incarnation(keys[0], token)).Then(clientv3.OpDelete(keys[0])))
	}
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpDelete(k)
		if token != 0 {
			ops[i] = clientv3.OpTxn([]clientv3.Cmp{incarnation(k, token)}, []clientv3.Op{clientv3.OpDelete(k)}, nil)
		}
	}
	return b.commit(b.cli.Txn(ctx).Then(ops...))
}

// commit commits txn and returns the revision etcd answered at.
func (b *Backend) commit(txn clientv3.Txn) (int64, error) {
	resp, err := txn.Commit()
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// claimKeys returns the etcd keys of claim c, one per key it holds.
func (b *Backend) claimKeys(c backend.Claim) []string {
	keys := c.AllKeys()
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = b.layout.claim(k, c.ID)
	}
	return out
}

// discard removes the claim of a failed Acquire and then frees its name,
// unless the name is kept (see registry.keepName). With token 0 (the
// create's outcome is unknown) the name is kept, and once the claim is
// deleted a claim that the create makes there later is deleted in turn
// (see watchStray).
// It uses contexts of its own, detached from ctx's cancellation (ctx has
// often ended: that may be why Acquire failed), so cleanup neither hangs on
// a dead caller context nor is skipped because of one.
//
// With now set it tries once before returning, so that a failed Acquire
// normally leaves nothing behind when it returns: bounded by cleanupTimeout
// while ctx is alive, and by the shorter endedCleanupTimeout once it has
// ended, so that a cancelled Acquire still returns promptly when etcd is
// slow. Without now (ctx's deadline passed while etcd did not answer, so an
// immediate try would most likely keep the caller waiting) and whenever
// that try fails, a background goroutine keeps trying with backoff until it
// succeeds or the Backend is closed. The claim's lease bounds how long a
// claim that cannot be deleted blocks the key.
func (b *Backend) discard(ctx context.Context, e *entry, token int64, now bool) {
	if token == 0 {
		// The create's outcome is unknown: it may yet be applied, and so
		// may a delete by name that fails below.
		b.reg.keepName(e)
	}
	bound := cleanupTimeout
	if ctx.Err() != nil {
		bound = endedCleanupTimeout
	}
	if now && b.remove(context.WithoutCancel(ctx), e, token, bound) {
		return
	}
	if !b.spawn(func() { b.removeUntilGone(e, token, false) }) && !now {
		// Closing: no background work any more, so try once here.
		b.remove(context.WithoutCancel(ctx), e, token, bound)
	}
}

// remove deletes e's claim (see deleteClaim) within bound of parent and
// then forgets e; it reports whether the delete succeeded. With token 0
// (the create's outcome is unknown, and e keeps its name) it then watches
// every key of e for a stray (see watchStray) from after the delete.
func (b *Backend) remove(parent context.Context, e *entry, token int64, bound time.Duration) bool {
	ctx, cancel := context.WithTimeout(parent, bound)
	defer cancel()
	rev, err := b.deleteClaim(ctx, e.allKeys(), token)
	if err != nil {
		return false
	}
	b.reg.forget(e)
	if token == 0 {
		for _, k := range e.allKeys() {
			b.watchStray(e, k, rev+1)
		}
	}
	return true
}

// removeUntilGone is remove, tried again with backoff (after a first pause
// unless now) until it succeeds or the Backend is closed (see untilDone).
func (b *Backend) removeUntilGone(e *entry, token int64, now bool) {
	b.untilDone(now, func() bool { return b.remove(b.ctx, e, token, cleanupTimeout) })
}

// untilDone calls try until it reports success or the Backend is closed,
// pausing with backoff between tries, and before the first unless now. It
// runs in a goroutine of the Backend's, and does not hold up Close.
func (b *Backend) untilDone(now bool, try func() bool) {
	if now && try() {
		return
	}
	for bo := backoff(0); bo.wait(b.ctx) && !try(); {
	}
}

// abandon removes what is left of a held multi-key claim that was lost at
// one of its keys (see entry.keyDeleted), compared on the claim's identity
// at every key, and then frees its name. It only spawns the work, since
// the watch that saw the loss calls it; the work tries until it succeeds
// or the Backend is closed, which it does not hold up.
func (b *Backend) abandon(e *entry, token int64) {
	b.spawn(func() { b.removeUntilGone(e, token, true) })
}

// Strays. An Acquire whose create got no answer cannot know whether etcd
// will still apply it: its cleanup deletes the claim by name (discard),
// and the create may arrive after that delete. The claim it makes then is
// bound to our live lease and blocks its key for as long as the lease is
// kept alive, which the Backend's other claims on it may do for ever. So
// once the cleanup's delete has succeeded, each key of the name, which
// stays taken (keepName), is watched on the mux from the revision after
// that delete, and a claim created there is deleted. The name is kept, so
// no acquisition of this Backend uses it: whatever appears under it is a
// stray of ours. The watches last until the entry is forgotten with its
// lease (registry.forgetLease) or the Backend is closed.

// strayWatch is the target of the watch of key, one key of e's kept name.
type strayWatch struct {
	b   *Backend
	e   *entry
	key string
}

// watchStray watches key, one key of e's kept name, for a claim created
// there at revision from or later, unless e has been forgotten.
func (b *Backend) watchStray(e *entry, key string, from int64) {
	// Created at from itself, not at etcd's current revision (keyWatch.now):
	// the key is absent at from-1, which the read that closes the gap of a
	// watch created at the current revision would report as an event every
	// time. etcd may deliver an event up to 100ms late; a stray can wait.
	b.reg.keepWatch(e, &keyWatch{key: key, from: from, puts: true, target: &strayWatch{b: b, e: e, key: key}})
}

// keyDeleted implements watchTarget: the key's first event from the watch's
// resume revision on is at rev (a claim created there, or deleted), or,
// after a compaction, a read at rev found a claim there or none. The mux
// calls it on a goroutine that must not send, so the sweep is spawned, as
// abandon's work is.
func (s *strayWatch) keyDeleted(rev int64) {
	s.b.spawn(func() { s.b.sweep(s.e, s.key, rev) })
}

// watchFailed implements watchTarget: the key is left unwatched, and a
// stray there blocks it until the lease ends.
func (s *strayWatch) watchFailed(error) {}

// sweep deletes the claim under key, one key of e's kept name, if it was
// created at or before revision rev, trying with backoff until it succeeds
// or the Backend is closed, and then watches key again from rev+1. A claim
// created after rev is left alone, for the watch to report. That watch
// also reports this delete, whose sweep then finds nothing to delete.
func (b *Backend) sweep(e *entry, key string, rev int64) {
	seen := clientv3.Compare(clientv3.CreateRevision(key), "<", rev+1)
	b.untilDone(true, func() bool {
		ctx, cancel := context.WithTimeout(b.ctx, cleanupTimeout)
		defer cancel()
		if _, err := b.commit(b.cli.Txn(ctx).If(seen).Then(clientv3.OpDelete(key))); err != nil {
			return false
		}
		b.watchStray(e, key, rev+1)
		return true
	})
}
