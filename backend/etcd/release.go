package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Release deletes claim c in one request, at every key of a multi-key
// claim. It never deletes another claim - not a later claim under the
// same name, not the next holder - so a retried or late Release is
// harmless: the delete compares on the claim's identity (key + create
// revision, c.Token), or, for the claim the Backend handed out and still
// has as held, goes by its name, which no other claim can have meanwhile.
// A claim already gone gives nil.
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
	// The release of a claim the registry still has as held ends its
	// entry before the delete is sent, so that the delete is not taken for
	// a loss. Its name is then this claim's alone until the entry is
	// forgotten, so a delete by name removes this claim: as safe as the
	// Txn, and cheaper. That holds only if the claim was not lost before
	// end (see registry.end). A delete that got no answer may be applied
	// late, when it would remove whatever claim has the name then, so its
	// entry is not forgotten: the name stays taken until the lease ends
	// (registry.forgetLease).
	if e := b.reg.held(b.ClaimKey(c), int64(c.Token)); e != nil && b.reg.end(e) {
		if err := b.deleteClaim(ctx, e.keys, 0); err != nil {
			return rpcError(ctx, "release", err)
		}
		b.reg.forget(e)
		return nil
	}
	// A release the registry cannot vouch for (lost, late, retried after
	// the entry went, misaddressed) compares on the token; token 0 names
	// no claim.
	if c.Token == 0 {
		return nil
	}
	return rpcError(ctx, "release", b.deleteClaim(ctx, b.claimKeys(c), int64(c.Token)))
}

// deleteClaim removes a claim at its etcd keys, one per key it holds, in
// one request: the incarnation created at revision token, or, with token
// 0 (the release of a claim still registered as held), whatever is under
// the name (a plain Delete for a single key). Each key is compared with a
// nested Txn of its own, so that a key of a multi-key claim where the
// claim is already gone (an operator deleted it there) does not keep it at
// the others.
func (b *Backend) deleteClaim(ctx context.Context, keys []string, token int64) error {
	if len(keys) == 1 && token == 0 {
		_, err := b.cli.Delete(ctx, keys[0])
		return err
	}
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpDelete(k)
		if token != 0 {
			ops[i] = guardedDelete(k, token)
		}
	}
	_, err := b.cli.Txn(ctx).Then(ops...).Commit()
	return err
}

// guardedDelete deletes the etcd key key if it is the claim created at
// revision token.
func guardedDelete(key string, token int64) clientv3.Op {
	return clientv3.OpTxn([]clientv3.Cmp{incarnation(key, token)}, []clientv3.Op{clientv3.OpDelete(key)}, nil)
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

// discard removes the claim of a failed Acquire and then frees its name.
// With token 0 (the create's outcome is unknown) it fences the claim's
// lease as it deletes (see fenceDelete), so that the create, applied late,
// makes nothing.
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
// that try fails, a background goroutine keeps trying (removeUntilGone).
// The claim's lease bounds how long a claim that cannot be deleted blocks
// the key.
func (b *Backend) discard(ctx context.Context, e *entry, token int64, now bool) {
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

// remove deletes e's claim (see deleteClaim; with token 0, fenceDelete)
// within bound of parent and then forgets e; it reports whether the delete
// succeeded.
func (b *Backend) remove(parent context.Context, e *entry, token int64, bound time.Duration) bool {
	ctx, cancel := context.WithTimeout(parent, bound)
	defer cancel()
	var err error
	if token == 0 {
		err = b.fenceDelete(ctx, e.lease, e.keys...)
	} else {
		err = b.deleteClaim(ctx, e.keys, token)
	}
	if err != nil {
		return false
	}
	b.reg.forget(e)
	return true
}

// removeUntilGone is remove, tried again as every failed delete is (see
// backend.Retry; at once if now) until it succeeds, the claim's lease has
// ended (remove then succeeds) or the Backend is closed. It runs in a
// goroutine of the Backend's, and does not hold up Close.
func (b *Backend) removeUntilGone(e *entry, token int64, now bool) {
	backend.Retry(b.ctx.Done(), now, func() bool { return b.remove(b.ctx, e, token, cleanupTimeout) })
}
