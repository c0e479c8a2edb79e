package ashlock

import (
	"sync/atomic"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// leaseKey identifies a pool slot: guards that ask for the same TTL and the
// same renewal interval share one backend lease, so the cost of renewing
// does not grow with the number of guards (guarantee 9).
type leaseKey struct {
	ttl      time.Duration
	interval time.Duration
}

// lease is one backend lease shared by every guard of its leaseKey. Fields
// marked "guarded" are protected by watchdog.mu.
type lease struct {
	key leaseKey
	// ready is closed once the grant has finished; id, granted, margin and
	// grantErr are read-only after that.
	ready    chan struct{}
	grantErr error
	id       backend.LeaseID
	ttl      time.Duration // as granted by the backend
	margin   time.Duration

	// deadline is the end of local validity, as nanoseconds since the
	// watchdog's epoch (monotonic). Kept atomic so that FencingToken can
	// check it without taking the watchdog's lock; written under the lock.
	deadline atomic.Int64

	// guarded by watchdog.mu
	granted     bool // the grant succeeded: guards may join without waiting on ready
	nextRenew   time.Time
	renewing    bool
	recheck     bool   // leaveLost came while a renewal was in flight: renew again at once
	cancelRenew func() // cancels the in-flight renewal, if any
	guards      guardList
	idleSince   time.Time // when the scheduler first saw guards empty; zero while in use
	lost        bool      // poisoned or revoked: never joined again
}

// margin is how much earlier than the store the client gives up on a lease:
// about max(100ms, TTL/10), so that a holder stops trusting its lease before
// the store can expire it and grant the key to someone else, even with some
// clock-rate drift and scheduling delay. It is capped at a quarter of the
// TTL so that very short TTLs (tests, the memory backend) stay usable.
func margin(ttl time.Duration) time.Duration {
	m := max(100*time.Millisecond, ttl/10)
	return min(m, ttl/4)
}

// renewAfter is how long after a renewal's send the next one is due: the
// interval, but never later than one margin before the local deadline
// that renewal set, so that the next renewal has time to be answered
// however close to the TTL the interval was set (an interval is only
// required to be below the TTL). margin <= ttl/4, so it is above zero.
func renewAfter(interval, ttl time.Duration) time.Duration {
	return min(interval, ttl-2*margin(ttl))
}
