package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Release deletes claim c, comparing on its identity (key + create
// revision, c.Token), in one round trip. It never deletes another claim -
// not a later incarnation of the same key, not the next holder - so a
// retried or late Release is harmless, even once c's name has been lent to
// a later claim of the same key (that claim has a higher create revision).
// A claim already gone gives nil.
//
// The comparison is explicit, a Txn that deletes only if the create
// revision still equals c.Token, whenever the Backend cannot vouch for the
// claim key. It can when c is the claim it handed out and still has as
// held (removeClaim succeeds): then the claim's name is lent to c alone
// (names.go), so no other incarnation of the key can exist but c or a
// stray of an abandoned acquisition of this Backend, and a plain Delete -
// the failed-Acquire cleanup's delete by name, and the Mutex's Unlock - is
// the same comparison, at the cost of a Delete instead of a Txn.
//
// OnLost is not called for c once Release has been called, whatever its
// outcome. Release blocks for one round trip; failures wrap
// backend.ErrUnavailable (joined with ctx.Err() if ctx ended first). Safe
// for concurrent use.
func (b *Backend) Release(ctx context.Context, c backend.Claim) error {
	if b.closed.Load() {
		return closedError("release")
	}
	key := b.ClaimKey(c)
	// Unregister first: the delete this call makes must not look like a
	// loss. Only the call that unregisters the claim may give its name
	// back: a repeated, late or forged Release of the same name must not
	// return a name lent to someone else since. Token 0 names no claim.
	// The claim's watch is parked, not cancelled, and goes back with the
	// name, so the next Acquire of the key reuses it (see names.go).
	var lent bool
	var w *keyWatch
	if c.Token != 0 {
		lent, w = b.reg.removeClaim(key, int64(c.Token))
	}
	var err error
	if lent {
		_, err = b.cli.Delete(ctx, key)
	} else {
		_, err = b.cli.Txn(ctx).
			If(incarnation(key, int64(c.Token))).
			Then(clientv3.OpDelete(key)).
			Commit()
	}
	if err != nil {
		// Whether the claim is gone is unknown: the name is forgotten.
		if w != nil {
			b.reg.mux.stop(w)
		}
		return rpcError(ctx, "release", err)
	}
	switch {
	case !lent:
	case w == nil:
		// Free, and its claim went without a watch or gave it up: a
		// short hold (see latewatch.go; also a watch that could not be
		// parked, which costs the next claim no more than a late start).
		b.names.giveBackShort(c.Key, c.ID)
	default:
		// Deleted now or found gone already: either way the name is free.
		b.names.giveBack(c.Key, c.ID, w)
	}
	return nil
}

// deleteClaim removes the claim at key: guarded by its create revision when
// known, by its name alone otherwise. The name alone is safe because the
// name is lent to the acquisition being cleaned up until this delete has
// succeeded: no other acquisition uses that key meanwhile.
func (b *Backend) deleteClaim(ctx context.Context, key string, token int64) error {
	if token == 0 {
		_, err := b.cli.Delete(ctx, key)
		return err
	}
	_, err := b.cli.Txn(ctx).
		If(incarnation(key, token)).
		Then(clientv3.OpDelete(key)).
		Commit()
	return err
}

// discard removes the claim of a failed Acquire, with contexts of its own,
// detached from ctx's cancellation (ctx has often ended: that may be why
// Acquire failed), so cleanup neither hangs on a dead caller context nor is
// skipped because of one.
//
// With now set it tries once before returning, so that a failed Acquire
// normally leaves nothing behind when it returns. That try is bounded by
// cleanupTimeout while the caller's ctx is alive, and by the much shorter
// endedCleanupTimeout once it has ended, so that a cancelled Acquire still
// returns promptly when etcd is slow. Without now - the caller's deadline
// passed while etcd did not answer, so an immediate try would most likely
// just keep the caller waiting - and whenever the first try fails, a
// background goroutine keeps trying with backoff until it succeeds or the
// Backend is closed. The claim's lease bounds how long a claim that cannot
// be deleted can block the key. gone is called once a delete has succeeded
// (the claim is known to be gone), and never if none does.
func (b *Backend) discard(ctx context.Context, key string, token int64, now bool, gone func()) {
	try := func(parent context.Context, bound time.Duration) error {
		cctx, cancel := context.WithTimeout(parent, bound)
		defer cancel()
		err := b.deleteClaim(cctx, key, token)
		if err == nil {
			gone()
		}
		return err
	}
	bound := cleanupTimeout
	if ctx.Err() != nil {
		bound = endedCleanupTimeout
	}
	if now && try(context.WithoutCancel(ctx), bound) == nil {
		return
	}
	retry := func() {
		backoff := 100 * time.Millisecond
		for {
			select {
			case <-b.ctx.Done():
				return
			case <-time.After(backoff):
			}
			if try(b.ctx, cleanupTimeout) == nil {
				return
			}
			backoff = min(2*backoff, cleanupTimeout)
		}
	}
	if !b.spawn(retry) && !now {
		// Closing: no background work any more, so try once here.
		_ = try(context.WithoutCancel(ctx), bound)
	}
}
