package memory

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/ash-lock/ashlock/backend"
)

// Acquire creates a claim on req.Key (on every key of req.Keys) bound to
// req.Lease and, if req.Wait, blocks until it holds every key, ctx ends,
// the claim is lost or the Backend closes. The claim is named req.ID or,
// when that is empty, by the Backend (see NamesClaims).
//
// A fair request takes a token and a place at the end of each key's queue
// at once, and holds once the queue rule (see keyState) admits it at every
// key. A non-fair one waits outside the queues and takes a token once a
// claim made now would hold every key; fair claims queued meanwhile go
// first. (A non-fair request whose permit count differs from the claims
// queued when it arrives fails with ErrPermitMismatch; one that finds
// another count queued later, while it waits, waits for those claims to
// go, since a claim made then could not hold.) Whoever removes a claim
// wakes only the requests that now hold, so waiting neither polls nor
// stampedes.
//
// When the claim comes to hold its keys and req.Stamp is set, Acquire calls
// it (without holding the Backend's mutex) with the highest stamp recorded
// for any of them, and records the result at each.
//
// On success the claim holds its keys and is returned. On failure nothing
// is left behind and whatever the claim held passes on. Errors wrap:
// backend.ErrInvalidKey or backend.ErrInvalidConfig (req outside the
// model's limits, see backend.CheckRequest), backend.ErrPermitMismatch (a
// key's queued claims agree on another permit count), backend.ErrLocked
// (req.Wait false and a claim made now would not hold every key),
// backend.ErrLeaseExpired (the lease is unknown or ended, or the claim was
// removed while waiting), backend.ErrClosed, the error of req.Stamp, or
// ctx's error if it ended first (never ErrLocked then).
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (held backend.Claim, err error) {
	if ctx.Err() != nil {
		return backend.Claim{}, fmt.Errorf("memory: acquire %q: %w", req.Key, backend.ContextError(ctx))
	}
	// The check looks only at the request, so it runs before the
	// Backend's mutex is taken.
	if err := backend.CheckRequest(&req); err != nil {
		return backend.Claim{}, fmt.Errorf("memory: acquire %q: %w", req.Key, err)
	}
	// No deferred Unlock: this is half of every uncontended cycle, and an
	// open-coded defer still costs it.
	b.mu.Lock()
	c, ready, err := b.admitLocked(&req, &held)
	b.mu.Unlock()
	if err != nil {
		return backend.Claim{}, err
	}
	if c == nil {
		// Held at once and nothing to stamp: admitLocked finished it under the
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

// admitLocked puts a valid request in the store. It returns the claim
// and, if the request must wait, the channel that will wake it; the caller
// finishes the claim with finish (or abandon). A request that holds its
// keys at once and has no stamp to take is finished under the same lock:
// admitLocked returns a nil claim and writes the finished Claim to held,
// so the common uncontended Acquire locks the Backend once, not twice.
// (Both structs are passed by pointer: copying them is a noticeable part
// of that path.)
func (b *Backend) admitLocked(req *backend.AcquireRequest, held *backend.Claim) (*claim, chan struct{}, error) {
	n := int32(max(req.Permits, 1))
	if b.closed {
		return nil, nil, errClosed("acquire")
	}
	l := b.leases[req.Lease]
	if l == nil {
		return nil, nil, fmt.Errorf("memory: acquire %q: lease %d is not live: %w",
			req.Key, req.Lease, backend.ErrLeaseExpired)
	}
	// Every check comes before anything is created, so that a refused
	// request leaves nothing behind. The single-key case keeps its one
	// key lookup.
	var k *keyState
	var now bool
	if req.Keys == nil {
		k = b.keyLocked(req.Key)
		if k.mismatch(n) {
			return nil, nil, mismatchErr(req.Key, n, k.permits)
		}
		now = k.admitsNew(req.Shared, n)
	} else {
		now = true
		for _, name := range req.Keys {
			x := b.keyLocked(name)
			if x.mismatch(n) {
				return nil, nil, mismatchErr(name, n, x.permits)
			}
			now = now && x.admitsNew(req.Shared, n)
		}
	}
	if !now && !req.Wait {
		return nil, nil, fmt.Errorf("memory: acquire %q: %w", req.Key, backend.ErrLocked)
	}

	c := b.newClaimLocked()
	c.lease, c.id, c.owner, c.onLost = l, req.ID, req.Owner, req.OnLost
	c.shared, c.permits = req.Shared, n
	if req.Value != nil {
		c.extra().value = bytes.Clone(req.Value) // the Backend's own copy
	}
	if c.id == "" {
		if c.name == "" {
			c.name = uuid.NewString()
		}
		c.id = c.name
	}
	if req.Keys == nil {
		if k == nil {
			k = &keyState{name: req.Key}
			b.keys[req.Key] = k
		}
		c.first.key = k
	} else {
		b.attachKeysLocked(c, req.Keys)
	}
	l.claims.pushBack(c)
	if !now && !req.Fair {
		c.ready = make(chan struct{})
		c.waitUnfair()
		return c, c.ready, nil
	}
	c.token = b.nextTokenLocked()
	if req.Keys == nil {
		// enqueueLocked for one key, spelled out for the uncontended
		// path's sake: with one key, admitsNew has already said whether
		// the rule admits the entry, and the claim holds exactly then.
		e := &c.first
		if k.queue.empty() {
			k.permits = n
		}
		k.queue.pushBack(e)
		if now {
			k.markFree(e)
			b.promoteLocked(c)
		} else if k.frontier == nil {
			k.frontier = e
		}
	} else {
		b.enqueueLocked(c)
	}
	b.flushLocked()
	if c.state == stateHolding {
		if req.Stamp == nil {
			c.returned = true
			*held = c.export()
			b.doneWithLocked(c)
			return nil, nil, nil
		}
		return c, nil, nil
	}
	c.ready = make(chan struct{})
	return c, c.ready, nil
}

// attachKeysLocked gives c, a multi-key claim, one entry per key, creating
// the keys' records as needed.
func (b *Backend) attachKeysLocked(c *claim, keys []string) {
	x := c.extra()
	x.keys, x.more = slices.Clone(keys), make([]entry, len(keys)-1)
	for i, name := range x.keys {
		e := c.entryAt(int32(i))
		e.c = c
		if e.key = b.keyLocked(name); e.key == nil {
			e.key = &keyState{name: name}
			b.keys[name] = e.key
		}
	}
}

func mismatchErr(key string, n, have int32) error {
	return fmt.Errorf("memory: acquire %q: %d permits, the key's queued claims have %d: %w",
		key, n, have, backend.ErrPermitMismatch)
}

// nextTokenLocked issues a fencing token. One counter serves every key, so
// a token is never issued twice, whatever happens to keys and claims.
func (b *Backend) nextTokenLocked() uint64 {
	b.rev++
	return b.rev
}

// enqueueLocked appends c, which has its token, to the queue of each of its
// keys, and promotes it if the queue rule admits it at all of them.
func (b *Backend) enqueueLocked(c *claim) {
	c.state = stateQueued
	holds := false
	for i := range c.nKeys() {
		e := c.entryAt(i)
		if e.key.push(e) {
			holds = true // c is free at this key, its last one not free until now
		}
	}
	if holds {
		b.promoteLocked(c)
	}
}

// promoteLocked makes c, free at every key, a holder: it takes its permit
// and wakes its request.
func (b *Backend) promoteLocked(c *claim) {
	c.state = stateHolding
	c.acquiredAt = b.clock.Now()
	if b.obs != nil {
		b.obs.markLocked(c) // flushed at the end of the operation
	}
	if c.permits > 1 {
		c.permit = c.first.key.takePermit()
	}
	c.wake()
}

// finish completes an Acquire whose claim holds its keys (or has just been
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
		// A multi-key claim follows every earlier holder of each of its
		// keys, so it is given the highest stamp over all of them.
		var prev backend.Timestamp
		for i := range c.nKeys() {
			if p := b.stamps[c.entryAt(i).key.name]; prev.Less(p) {
				prev = p
			}
		}
		// Stamp is the caller's code: call it without the mutex so that a
		// slow one delays nobody else. Nothing can take the keys from c
		// meanwhile except a loss (expiry, revoke, DeleteClaim), which the
		// re-check below catches; a claim lost here records nothing.
		b.mu.Unlock()
		st, err := stamp(prev)
		b.mu.Lock()
		if err != nil {
			b.removeLocked(c, endOwn) // nothing if a loss removed it meanwhile
			b.flushLocked()
			return backend.Claim{}, fmt.Errorf("memory: acquire %q: stamp: %w", c.first.key.name, err)
		}
		if err := b.checkHoldingLocked(c); err != nil {
			return backend.Claim{}, err
		}
		for i := range c.nKeys() {
			if name := c.entryAt(i).key.name; b.stamps[name].Less(st) {
				b.stamps[name] = st
			}
		}
		c.stamp = st
	}
	c.returned = true
	return c.export(), nil
}

// checkHoldingLocked returns nil if c holds its keys and may be returned;
// otherwise why not, removing c if the Backend has closed.
func (b *Backend) checkHoldingLocked(c *claim) error {
	switch {
	case c.state == stateGone:
		return c.endErr()
	case b.closed:
		b.removeLocked(c, endClosed)
		b.flushLocked()
		return errClosed("acquire")
	case c.state != stateHolding:
		panic("memory: woken claim neither holds its keys nor is gone")
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
	// The claim may have just come to hold its keys; removing it hands
	// them on, so a cancelled request never keeps them.
	b.removeLocked(c, endOwn)
	b.flushLocked()
	return err
}
