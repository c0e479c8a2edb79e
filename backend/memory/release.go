package memory

import (
	"bytes"
	"context"
	"fmt"

	"github.com/ash-lock/ashlock/backend"
)

// Release removes the claim named by c.Key, c.ID and c.Token if the store
// still has it, on every key of a multi-key claim, and hands what it held
// on. It never removes any other claim, so a stale or repeated Release is
// harmless, and it returns nil when the claim is already gone. OnLost is
// never called for a released claim. Release does not block, so it
// completes even when ctx has already ended; after Close it returns
// backend.ErrClosed.
func (b *Backend) Release(_ context.Context, c backend.Claim) error {
	// No defer: this is half of every uncontended cycle, and nothing
	// below can fail or call out of the package save the Clock.
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errClosed("release")
	}
	if x := b.findLocked(&c); x != nil {
		b.removeLocked(x, endOwn)
		b.flushLocked()
	}
	b.mu.Unlock()
	return nil
}

// findLocked returns the store's claim that c names (by its first key, ID
// and token), or nil if the store no longer has it. The token is unique
// across keys, so the first key is enough to find a multi-key claim.
func (b *Backend) findLocked(c *backend.Claim) *claim {
	k := b.keyLocked(c.Key)
	if k == nil {
		return nil
	}
	for e := k.queue.head; e != nil; e = e.next {
		if x := e.c; x.token == c.Token && x.id == c.ID {
			return x
		}
	}
	return nil
}

// loseLocked removes c, as removeLocked does, for a reason other than its
// owner's doing (why is endExpired, endRevoked or endDeleted), and appends
// the OnLost call owed, if any, to lost: only a claim already returned by
// Acquire gets one, once for all its keys. (A claim lost before that fails
// its own Acquire instead.)
func (b *Backend) loseLocked(c *claim, why endReason, lost []lostCall) []lostCall {
	if c.state != stateGone && c.returned && c.onLost != nil {
		// Read before removeLocked, which may recycle c.
		c.why = why
		lost = append(lost, lostCall{f: c.onLost, cause: c.endErr()})
	}
	b.removeLocked(c, why)
	return lost
}

// removeLocked takes c out of the store for reason why: off its keys and
// its lease, its waiting request woken, the claims it kept waiting
// admitted, and its keys' records dropped if now idle.
func (b *Backend) removeLocked(c *claim, why endReason) {
	switch c.state {
	case stateHolding, stateQueued:
		if c.state == stateHolding && c.permits > 1 {
			c.first.key.used.Clear(int(c.permit))
		}
		if !c.isMulti() {
			// unqueueMultiLocked for one key, spelled out: this is
			// every uncontended Release.
			k := c.first.key
			k.unlink(&c.first)
			if k.frontier != nil { // else every claim of k is free already
				b.advanceLocked(k)
			}
			if !k.unfair.empty() {
				b.admitUnfairLocked(k)
			}
		} else {
			b.unqueueMultiLocked(c)
		}
	case stateWaitingUnfair:
		c.leaveUnfair()
	case stateGone:
		return
	}
	c.lease.claims.remove(c)
	c.state, c.why = stateGone, why
	c.wake()
	if !c.isMulti() {
		if k := c.first.key; k.idle() {
			b.parkLocked(k)
		}
	} else {
		b.parkMultiLocked(c)
	}
	if b.obs != nil {
		b.obs.markLocked(c) // flushed by the operation that removes c
	}
	if c.reqDone {
		b.recycleLocked(c)
	}
}

// unqueueMultiLocked takes every entry of c, a multi-key claim, out of its
// keys' queues, and admits the claims its departure lets hold. It works
// in three passes, so that each sees c gone from every key: a claim
// admitted at one key may be waiting only for c's entry at another, and a
// non-fair waiter needs room at all its keys at once.
func (b *Backend) unqueueMultiLocked(c *claim) {
	for i := range c.nKeys() {
		e := c.entryAt(i)
		e.key.unlink(e)
	}
	for i := range c.nKeys() {
		if k := c.entryAt(i).key; k.frontier != nil {
			b.advanceLocked(k)
		}
	}
	for i := range c.nKeys() {
		if k := c.entryAt(i).key; !k.unfair.empty() {
			b.admitUnfairLocked(k)
		}
	}
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

// parkMultiLocked parks the last of c's keys that has become idle and
// deletes the others. Parking each in turn would not do: parking one key
// deletes the key parked before it, which may be another of c's keys, and
// parking that one afterwards would leave a parked record the map no
// longer has.
func (b *Backend) parkMultiLocked(c *claim) {
	var last *keyState
	for i := range c.nKeys() {
		if k := c.entryAt(i).key; k.idle() {
			if last != nil && last != b.parked {
				delete(b.keys, last.name)
			}
			last = k
		}
	}
	if last != nil {
		b.parkLocked(last)
	}
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

// endErr is the error a claim's request, or its OnLost, reports once the
// claim has left the store.
func (c *claim) endErr() error {
	name := c.first.key.name
	switch c.why {
	case endExpired:
		return fmt.Errorf("memory: claim on %q: lease %d expired: %w", name, c.lease.id, backend.ErrLeaseExpired)
	case endRevoked:
		return fmt.Errorf("memory: claim on %q: lease %d revoked: %w", name, c.lease.id, backend.ErrLeaseExpired)
	case endDeleted:
		return fmt.Errorf("memory: claim on %q deleted from the store: %w", name, backend.ErrLeaseExpired)
	case endClosed:
		return errClosed("acquire")
	}
	// Released, cancelled or stamp-failed claims are removed by their own
	// request, which never asks for this.
	return fmt.Errorf("memory: claim on %q: removed: %w", name, backend.ErrLeaseExpired)
}

// SetValue replaces the value published with c, which Inspect shows at
// each of its keys, with a copy of v. The claim is found as Release finds
// it (by c.Key, c.ID and c.Token), so the write compares on its identity:
// if the store no longer has the claim holding its keys, SetValue changes
// nothing and returns an error wrapping backend.ErrLeaseExpired. A v over
// backend.MaxValueLen bytes, or over backend.MaxValueTotal bytes for all
// of c's keys together, is backend.ErrInvalidConfig. SetValue does not
// block; it fails with ctx's error if ctx has already ended, and with
// backend.ErrClosed after Close.
//
// The old value is replaced, not written into: Claim.Value slices handed
// out earlier keep the value they had.
func (b *Backend) SetValue(ctx context.Context, c backend.Claim, v []byte) error {
	if err := backend.CheckValue(v, len(c.AllKeys())); err != nil {
		return fmt.Errorf("memory: set value on %q: %w: %w", c.Key, backend.ErrInvalidConfig, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("memory: set value on %q: %w", c.Key, backend.ContextError(ctx))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed("set value")
	}
	x := b.findLocked(&c)
	if x == nil || x.state != stateHolding {
		return fmt.Errorf("memory: set value on %q: claim with token %d is gone: %w",
			c.Key, c.Token, backend.ErrLeaseExpired)
	}
	x.extra().value = bytes.Clone(v)
	if b.obs != nil {
		b.obs.markLocked(x)
	}
	b.flushLocked()
	return nil
}
