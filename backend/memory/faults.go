package memory

import (
	"time"

	"github.com/ash-lock/ashlock/backend"
)

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
		call, ok := b.loseLocked(h, endDeleted)
		b.flushLocked()
		if ok {
			b.notifyLocked([]lostCall{call})
		}
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
