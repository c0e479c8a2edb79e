package memory

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/ash-lock/ashlock/backend"
)

// Acquire creates a claim on req.Key bound to req.Lease and, if req.Wait,
// blocks until it holds the key, ctx ends, the claim is lost or the Backend
// closes. The claim is named req.ID or, when that is empty, by the Backend
// (see NamesClaims).
//
// A fair request takes a token and a place at the end of the key's queue at
// once. A non-fair one waits outside the queue and takes a token when the
// queue empties; fair claims queued meanwhile go first. Whoever removes a
// holder hands the key to the next claim and wakes only that request, so
// waiting neither polls nor stampedes.
//
// When the claim comes to hold the key and req.Stamp is set, Acquire calls
// it (without holding the Backend's mutex) with the highest stamp recorded
// for the key, and records the result.
//
// On success the claim holds the key and is returned. On failure nothing is
// left behind and the key, if the claim held it, passes on. Errors wrap:
// backend.ErrLocked (req.Wait false and the key is held or claimed),
// backend.ErrLeaseExpired (the lease is unknown or ended, or the claim was
// removed while waiting), backend.ErrClosed, the error of req.Stamp, or
// ctx's error if it ended first (never ErrLocked then).
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (held backend.Claim, err error) {
	if ctx.Err() != nil {
		return backend.Claim{}, fmt.Errorf("memory: acquire %q: %w", req.Key, backend.ContextError(ctx))
	}
	c, ready, err := b.admit(&req, &held)
	if err != nil {
		return backend.Claim{}, err
	}
	if c == nil {
		// Held at once and nothing to stamp: admit finished it under the
		// same lock, into held.
		return held, nil
	}
	if ready != nil {
		select {
		case <-ready:
		case <-ctx.Done():
			return backend.Claim{}, b.abandon(c, fmt.Errorf("memory: acquire %q: %w", req.Key, backend.ContextError(ctx)))
		case <-b.done:
			return backend.Claim{}, b.abandon(c, errClosed("acquire"))
		}
	}
	return b.finish(c, req.Stamp)
}

// admit puts the request in the store. It returns the claim and, if the
// request must wait, the channel that will wake it; the caller finishes
// the claim with finish (or abandon). A request that holds the key at once
// and has no stamp to take is finished under the same lock: admit returns a
// nil claim and writes the finished Claim to held, so the common
// uncontended Acquire locks the Backend once, not twice. (Both structs are
// passed by pointer: copying them is a noticeable part of that path.)
func (b *Backend) admit(req *backend.AcquireRequest, held *backend.Claim) (*claim, chan struct{}, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, nil, errClosed("acquire")
	}
	l := b.leases[req.Lease]
	if l == nil {
		return nil, nil, fmt.Errorf("memory: acquire %q: lease %d is not live: %w",
			req.Key, req.Lease, backend.ErrLeaseExpired)
	}
	k := b.keyLocked(req.Key)
	busy := k != nil && !k.queue.empty()
	if busy && !req.Wait {
		return nil, nil, fmt.Errorf("memory: acquire %q: %w", req.Key, backend.ErrLocked)
	}
	if k == nil {
		k = &keyState{name: req.Key}
		b.keys[req.Key] = k
	}
	c := b.newClaimLocked()
	c.key, c.lease, c.id, c.owner, c.onLost = k, l, req.ID, req.Owner, req.OnLost
	if c.id == "" {
		if c.name == "" {
			c.name = uuid.NewString()
		}
		c.id = c.name
	}
	l.claims.pushBack(c, leaseLinks)
	switch {
	case !busy:
		c.token = b.nextTokenLocked()
		k.queue.pushBack(c, keyLinks)
		b.promoteLocked(c)
		if req.Stamp == nil {
			c.returned = true
			*held = c.export()
			b.doneWithLocked(c)
			return nil, nil, nil
		}
	case req.Fair:
		c.token = b.nextTokenLocked()
		c.state = stateQueued
		c.ready = make(chan struct{})
		k.queue.pushBack(c, keyLinks)
	default:
		c.state = stateWaitingUnfair
		c.ready = make(chan struct{})
		k.unfair.pushBack(c, keyLinks)
	}
	return c, c.ready, nil
}

// nextTokenLocked issues a fencing token. One counter serves every key, so
// a token is never issued twice, whatever happens to keys and claims.
func (b *Backend) nextTokenLocked() uint64 {
	b.rev++
	return b.rev
}

// promoteLocked makes c, already at the head of its key's queue, the holder
// and wakes its request.
func (b *Backend) promoteLocked(c *claim) {
	c.state = stateHolding
	c.acquiredAt = b.clock.Now()
	c.wake()
}

// finish completes an Acquire whose claim holds the key (or has just been
// removed): it stamps the claim and hands it to the caller.
func (b *Backend) finish(c *claim, stamp func(backend.Timestamp) (backend.Timestamp, error)) (backend.Claim, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Runs before the unlock, with the mutex held (also after the stamp
	// call, which drops and retakes it).
	defer b.doneWithLocked(c)
	if err := b.checkHoldingLocked(c); err != nil {
		return backend.Claim{}, err
	}
	if stamp != nil {
		prev := b.stamps[c.key.name]
		// Stamp is the caller's code: call it without the mutex so that a
		// slow one delays nobody else. Nothing can take the key from c
		// meanwhile except a loss (expiry, revoke, DeleteClaim), which the
		// re-check below catches; a claim lost here records nothing.
		b.mu.Unlock()
		st, err := stamp(prev)
		b.mu.Lock()
		if err != nil {
			if c.state != stateGone {
				b.removeLocked(c, endStampFailed)
			}
			return backend.Claim{}, fmt.Errorf("memory: acquire %q: stamp: %w", c.key.name, err)
		}
		if err := b.checkHoldingLocked(c); err != nil {
			return backend.Claim{}, err
		}
		if b.stamps[c.key.name].Less(st) {
			b.stamps[c.key.name] = st
		}
		c.stamp = st
	}
	c.returned = true
	return c.export(), nil
}

// checkHoldingLocked returns nil if c holds its key and may be returned;
// otherwise why not, removing c if the Backend has closed.
func (b *Backend) checkHoldingLocked(c *claim) error {
	switch {
	case c.state == stateGone:
		return c.endErr()
	case b.closed:
		b.removeLocked(c, endClosed)
		return errClosed("acquire")
	case c.state != stateHolding:
		panic("memory: woken claim neither holds its key nor is gone")
	}
	return nil
}

// abandon removes the claim of a request that stopped waiting and returns
// the error for it: err, or the reason the claim had already left.
func (b *Backend) abandon(c *claim, err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.doneWithLocked(c)
	if c.state == stateGone {
		return c.endErr()
	}
	// The claim may have just been handed the key; removing it hands the
	// key on, so a cancelled request never keeps it.
	b.removeLocked(c, endCancelled)
	return err
}

// Release removes the claim named by c.Key, c.ID and c.Token if the store
// still has it, handing the key to the next claim. It never removes any
// other claim, so a stale or repeated Release is harmless, and it returns
// nil when the claim is already gone. OnLost is never called for a released
// claim. Release does not block, so it completes even when ctx has already
// ended; after Close it returns backend.ErrClosed.
func (b *Backend) Release(_ context.Context, c backend.Claim) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed("release")
	}
	k := b.keyLocked(c.Key)
	if k == nil {
		return nil
	}
	for x := k.queue.head; x != nil; x = x.inKey.next {
		if x.token == c.Token && x.id == c.ID {
			b.removeLocked(x, endReleased)
			return nil
		}
	}
	return nil
}

// removeLocked takes c out of the store for reason why: off its key and its
// lease, its waiting request woken, its key handed on if it held it, and
// its key's record dropped if now idle. It returns the OnLost call owed, if
// any: only a claim already returned by Acquire and lost other than by its
// owner's doing gets one.
func (b *Backend) removeLocked(c *claim, why endReason) (lostCall, bool) {
	k := c.key
	held := c.state == stateHolding
	switch c.state {
	case stateHolding, stateQueued:
		k.queue.remove(c, keyLinks)
	case stateWaitingUnfair:
		k.unfair.remove(c, keyLinks)
	case stateGone:
		return lostCall{}, false
	}
	c.lease.claims.remove(c, leaseLinks)
	c.state, c.why = stateGone, why
	c.wake()
	if held {
		b.handOnLocked(k)
	}
	if k.idle() {
		b.parkLocked(k)
	}
	var call lostCall
	owed := false
	if c.returned && c.onLost != nil {
		switch why {
		case endExpired, endRevoked, endDeleted:
			call, owed = lostCall{f: c.onLost, cause: c.endErr()}, true
		}
	}
	if c.reqDone {
		b.recycleLocked(c)
	}
	return call, owed
}

// parkLocked keeps k, which has just become idle, in the key map as the
// one parked key, and deletes the key parked before it if that one is still
// idle. A key taken and freed again and again - the common pattern - then
// neither allocates its record nor rehashes the map on each cycle, while
// the map still holds at most one idle key, so a process that touches many
// keys does not accumulate them.
//
// No map lookup is needed to know that k and the parked key are the records
// in the map: a record is put in the map with its first claim and deleted
// only here, idle and no longer parked, so the key of any claim still in the
// store, and the parked key, are always the map's records for their names.
func (b *Backend) parkLocked(k *keyState) {
	if p := b.parked; p != nil && p != k && p.idle() {
		delete(b.keys, p.name)
	}
	b.parked = k
}

// keyLocked returns the record of key, or nil. The parked key is looked at
// first: it is the one most recently freed, so in an acquire/release cycle
// on one key both calls find it with a string comparison instead of a map
// lookup.
func (b *Backend) keyLocked(key string) *keyState {
	if p := b.parked; p != nil && p.name == key {
		return p
	}
	return b.keys[key]
}

// handOnLocked gives k, which has just lost its holder, to the next claim:
// the new head of the queue or, if the queue is empty, the first non-fair
// request, which takes its token now. Exactly one request is woken.
func (b *Backend) handOnLocked(k *keyState) {
	if h := k.queue.head; h != nil {
		b.promoteLocked(h)
		return
	}
	if n := k.unfair.head; n != nil {
		k.unfair.remove(n, keyLinks)
		n.token = b.nextTokenLocked()
		k.queue.pushBack(n, keyLinks)
		b.promoteLocked(n)
	}
}

// endErr is the error a claim's request, or its OnLost, reports once the
// claim has left the store.
func (c *claim) endErr() error {
	switch c.why {
	case endExpired:
		return fmt.Errorf("memory: claim on %q: lease %d expired: %w", c.key.name, c.lease.id, backend.ErrLeaseExpired)
	case endRevoked:
		return fmt.Errorf("memory: claim on %q: lease %d revoked: %w", c.key.name, c.lease.id, backend.ErrLeaseExpired)
	case endDeleted:
		return fmt.Errorf("memory: claim on %q deleted from the store: %w", c.key.name, backend.ErrLeaseExpired)
	case endClosed:
		return errClosed("acquire")
	}
	// Released, cancelled or stamp-failed claims are removed by their own
	// request, which never asks for this.
	return fmt.Errorf("memory: claim on %q: removed: %w", c.key.name, backend.ErrLeaseExpired)
}
