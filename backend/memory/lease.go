package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// lease is a granted lease and the claims bound to it.
type lease struct {
	id     backend.LeaseID
	ttl    time.Duration
	timer  Timer // the current expiry timer; a renewal replaces it
	claims claimList
}

// Grant creates a lease that ends ttl from now unless renewed with
// KeepAlive. The granted TTL is exactly ttl: no rounding. A ttl <= 0 returns
// ErrInvalidTTL. Grant does not block; it fails with ctx's error if ctx has
// already ended, and with backend.ErrClosed after Close.
func (b *Backend) Grant(ctx context.Context, ttl time.Duration) (backend.Lease, error) {
	if ttl <= 0 {
		return backend.Lease{}, fmt.Errorf("%w (got %v)", ErrInvalidTTL, ttl)
	}
	if ctx.Err() != nil {
		return backend.Lease{}, fmt.Errorf("memory: grant: %w", backend.ContextError(ctx))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.Lease{}, errClosed("grant")
	}
	b.lastID++
	l := &lease{id: b.lastID, ttl: ttl}
	b.leases[l.id] = l
	b.armLocked(l)
	return backend.Lease{ID: l.id, TTL: ttl}, nil
}

// armLocked (re)starts l's expiry timer for a full TTL from now. A
// renewal racing with the timer either stopped it in time or replaced it
// before the timer's function gets the mutex, so a renewed lease is never
// ended by a stale timer.
func (b *Backend) armLocked(l *lease) {
	if l.timer != nil {
		l.timer.Stop()
	}
	var t Timer
	t = b.clock.AfterFunc(l.ttl, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.closed && b.leases[l.id] == l && l.timer == t {
			b.endLeaseLocked(l, endExpired)
		}
	})
	l.timer = t // under the mutex, which the timer's function takes first
}

// KeepAlive renews lease id for its full TTL and returns that TTL. The
// renewal takes effect when it reaches the store: at once, or after the
// delay set by DelayRenewals, during which KeepAlive blocks; the new
// deadline counts from then, which is never earlier than the caller's send
// time. An ended (or never granted) lease yields an error wrapping
// backend.ErrLeaseExpired, and an error set with FailRenewals is returned
// wrapped, without renewing. A ctx that has already ended fails KeepAlive at
// once with ctx's error; one that ends during a delay makes it return
// backend.ErrUnavailable joined with ctx's error. Neither renews. After
// Close, KeepAlive returns backend.ErrClosed.
func (b *Backend) KeepAlive(ctx context.Context, id backend.LeaseID) (time.Duration, error) {
	if ctx.Err() != nil {
		return 0, fmt.Errorf("memory: keep-alive of lease %d: %w", id, backend.ContextError(ctx))
	}
	b.mu.Lock()
	delay := b.renewDelay // a closed Backend ends the delay at once, and is reported below
	b.mu.Unlock()
	if delay > 0 {
		// Hang like a request stuck on the way to the store, on the
		// Backend's clock; a close ends the hang, and is reported below.
		elapsed := make(chan struct{})
		defer b.clock.AfterFunc(delay, func() { close(elapsed) }).Stop()
		select {
		case <-elapsed:
		case <-b.done:
		case <-ctx.Done():
			return 0, fmt.Errorf("memory: keep-alive of lease %d: renewal delayed by fault injection: %w: %w",
				id, backend.ErrUnavailable, backend.ContextError(ctx))
		}
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	switch l := b.leases[id]; {
	case b.closed:
		return 0, errClosed("keep-alive")
	case b.renewErr != nil:
		return 0, fmt.Errorf("memory: keep-alive of lease %d: injected failure: %w", id, b.renewErr)
	case l == nil:
		return 0, fmt.Errorf("memory: keep-alive of lease %d: %w", id, backend.ErrLeaseExpired)
	default:
		b.armLocked(l)
		return l.ttl, nil
	}
}

// Revoke ends lease id at once: every claim bound to it leaves the store,
// holders that Acquire returned get OnLost with a cause wrapping
// backend.ErrLeaseExpired, requests waiting on it fail with
// backend.ErrLeaseExpired, and each key it held passes to the next claim.
// Revoking an unknown or ended lease returns nil. Revoke never blocks, so it
// completes even when ctx has already ended. After Close it returns
// backend.ErrClosed.
func (b *Backend) Revoke(_ context.Context, id backend.LeaseID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed("revoke")
	}
	if l := b.leases[id]; l != nil {
		b.endLeaseLocked(l, endRevoked)
	}
	return nil
}

// endLeaseLocked forgets l and removes every claim bound to it.
func (b *Backend) endLeaseLocked(l *lease, why endReason) {
	delete(b.leases, l.id)
	l.timer.Stop()
	var lost []lostCall
	for c := l.claims.head; c != nil; {
		// Read next before removing c: removal clears c's links. Removing
		// a holder may promote another claim of this same lease; it is
		// still further down this list and is removed in turn, its waiter
		// woken once and finding it gone.
		next := c.inLease.next
		lost = b.loseLocked(c, why, lost)
		c = next
	}
	// Observers see the lease's end as one change, as on etcd, where a
	// revoke deletes its claims in one revision: never a waiter of l
	// promoted behind its holder in the moment before it goes in turn.
	b.flushLocked()
	b.notifyLocked(lost)
}

// The fault hooks below let tests of code built on ashlock make the store
// misbehave the way a real one can. Each takes effect at once, is safe for
// concurrent use, never blocks, and does nothing after Close.

// FailRenewals makes every KeepAlive that reaches the store from now on fail
// with an error wrapping err, without renewing: the lease keeps running down
// and expires after its TTL as it would if the store were unreachable. Pass
// an error wrapping backend.ErrUnavailable to imitate a network failure.
// FailRenewals(nil) lets renewals through again.
func (b *Backend) FailRenewals(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.renewErr = err
}

// DelayRenewals makes every KeepAlive that starts from now on hang for d,
// measured on the Backend's clock, before it reaches the store, like a
// request stuck on a slow link. A KeepAlive whose context ends during the
// hang returns backend.ErrUnavailable joined with the context's error and
// renews nothing; one that outlasts the hang renews as usual, unless its
// lease expired meanwhile. DelayRenewals(0) stops delaying renewals that
// start later; ones already hanging keep their delay.
func (b *Backend) DelayRenewals(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.renewDelay = d
}

// ExpireLease ends lease id now, exactly as if its TTL had run out: every
// claim bound to it leaves the store, holders get OnLost with a cause
// wrapping backend.ErrLeaseExpired, waiting requests on it fail with
// backend.ErrLeaseExpired, and each key passes to its next claim. It reports
// whether the lease was live.
func (b *Backend) ExpireLease(id backend.LeaseID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.leases[id]
	if b.closed || l == nil {
		return false
	}
	b.endLeaseLocked(l, endExpired)
	return true
}

// ExpireKey expires the lease of key's oldest holder now, as ExpireLease
// does. Because a store expires leases, not single claims, every other
// claim bound to that lease (other keys held through the same pooled lease,
// requests waiting on it) goes too, as it would on etcd. It is the hook to
// use when a test knows the key but not the lease behind it. It reports
// whether the key had a holder.
func (b *Backend) ExpireKey(key string) bool {
	return b.onHolder(key, func(h *claim) { b.endLeaseLocked(h.lease, endExpired) })
}

// DeleteClaim removes key's oldest holder claim now, as an operator
// deleting it from the store would: its lease and every other claim stay,
// the holder gets OnLost with a cause wrapping backend.ErrLeaseExpired (or,
// if its Acquire has not returned yet, that Acquire fails with it), and
// what it held passes to the next claims. A multi-key claim loses all its
// keys: it holds them all or none. It reports whether the key had a
// holder.
func (b *Backend) DeleteClaim(key string) bool {
	return b.onHolder(key, func(h *claim) {
		lost := b.loseLocked(h, endDeleted, nil)
		b.flushLocked()
		b.notifyLocked(lost)
	})
}

// onHolder calls f, under the Backend's mutex, with key's oldest holder,
// and reports whether the key had one (a closed Backend has none).
func (b *Backend) onHolder(key string, f func(h *claim)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	var h *claim
	if k := b.keys[key]; k != nil && !b.closed {
		h = k.oldestHolder()
	}
	if h != nil {
		f(h)
	}
	return h != nil
}
