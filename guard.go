package ashlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// A Guard is a held lock. It stays valid until Unlock, Close, or the moment
// its lease can no longer be trusted; after that it is ended for good and
// FencingToken refuses to hand out its token.
//
// All methods are safe for concurrent use.
type Guard struct {
	// A Guard is allocated on every acquisition and cannot be pooled
	// (callers keep it after Unlock), so its size is part of what a lock
	// costs: the fields are laid out to fit the 176-byte size class (see
	// TestGuardSize), with the key kept only in claim and the flags packed
	// together.

	client  *LockClient
	lease   *lease
	inLease guardLinks // place in lease.guards; guarded by watchdog.mu
	// acquired is when the guard was handed out, on the watchdog's clock
	// (see watchdog.now), for the hold-time metric; set only if timed.
	acquired int64

	listed   bool // on lease.guards; guarded by watchdog.mu
	timed    bool // a metrics SDK recorded the acquisition; read-only after Acquire
	hasStamp bool // read-only after Acquire
	// counted: the guard was handed out and is counted in the held gauge;
	// whoever ends it takes it out again, exactly once. Guarded by mu.
	counted bool

	mu sync.Mutex
	// claim is set under mu once acquired and read-only after Acquire
	// returns. Its Key is the guard's key.
	claim backend.Claim
	err   error         // nil while valid
	done  chan struct{} // made on first Done call, closed by end
	onEnd func(error)   // cancel hook of a wait or of Do, run once by end
}

// closedChan is returned by Done for guards that ended before anyone asked.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Key returns the key the guard holds (or held).
func (g *Guard) Key() string { return g.claim.Key }

// FencingToken returns the guard's fencing token: strictly greater than
// the token of every earlier holder of the key. Attach it to every write to
// the protected resource, which must reject tokens lower than the highest
// it has seen (see package fencing).
//
// Once the guard is poisoned it returns ErrLeaseExpired, and after Unlock
// or Close ErrUnlocked, so a holder that lost its lease cannot authorise
// further writes. The check includes the local deadline itself, so it holds
// even in the instant before the watchdog has run.
func (g *Guard) FencingToken() (uint64, error) {
	c, err := g.Claim()
	return c.Token, err
}

// Stamp returns the hybrid-logical-clock stamp of the acquisition. The
// boolean is false when LockConfig.Stamps is off.
func (g *Guard) Stamp() (Timestamp, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.claim.Stamp, g.hasStamp
}

// Deadline returns the end of the guard's local validity as it stands now:
// the watchdog moves it forward with every acknowledged renewal. After the
// guard has ended it returns the time it ended at the latest.
func (g *Guard) Deadline() time.Time {
	return g.client.wd.at(g.lease.deadline.Load())
}

// Claim returns the backend's record of the claim, for backend-specific
// helpers such as the etcd backend's IsOwner comparison. It fails like
// FencingToken once the guard has ended.
func (g *Guard) Claim() (backend.Claim, error) {
	g.mu.Lock()
	c, err := g.claim, g.err
	g.mu.Unlock()
	if err == nil && !g.client.wd.trusted(g.lease) {
		// The deadline has passed but the scheduler has not run yet. Refuse
		// now; the scheduler will end the guard in a moment.
		err = ErrLeaseExpired
	}
	if err != nil {
		return backend.Claim{}, err
	}
	return c, nil
}

// Done returns a channel that is closed when the guard stops being valid:
// poisoned (Err returns ErrLeaseExpired) or released (ErrUnlocked).
func (g *Guard) Done() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done == nil {
		if g.err != nil {
			return closedChan
		}
		// Made lazily: most guards are never asked, and a channel is the
		// biggest part of a guard's footprint.
		g.done = make(chan struct{})
	}
	return g.done
}

// Err returns nil while the guard is valid, and ErrLeaseExpired or
// ErrUnlocked (possibly wrapped with detail) once it has ended.
func (g *Guard) Err() error {
	_, err := g.Claim()
	return err
}

// end ends the guard with err unless it has already ended. It reports
// whether this call ended it.
func (g *Guard) end(err error) bool {
	g.mu.Lock()
	if g.err != nil {
		g.mu.Unlock()
		return false
	}
	g.err = err
	if g.done != nil {
		close(g.done)
	}
	hook := g.onEnd
	g.onEnd = nil
	counted := g.counted
	g.counted = false
	g.mu.Unlock()
	if hook != nil {
		hook(err)
	}
	if counted {
		g.client.metrics.held(-1)
		if !errors.Is(err, ErrUnlocked) {
			// A held guard lost its lease; acquisitions that never handed
			// their guard out are reported by Acquire instead. Its claim
			// was written before it was counted, under mu: read-only now.
			g.client.log.Warn("ashlock: guard poisoned", "key", g.claim.Key, "token", g.claim.Token, "cause", err)
		}
	}
	return true
}

// setOnEnd arranges for f to run once, with the cause, when the guard ends
// (at once if it already has), until clearOnEnd.
func (g *Guard) setOnEnd(f func(error)) {
	g.mu.Lock()
	if err := g.err; err != nil {
		g.mu.Unlock()
		f(err)
		return
	}
	g.onEnd = f
	g.mu.Unlock()
}

func (g *Guard) clearOnEnd() {
	g.mu.Lock()
	g.onEnd = nil
	g.mu.Unlock()
}

// lossListener is the guard seen as the backend's LossListener. It is a
// distinct unexported type so that the method does not appear on Guard, and
// converting *Guard to it allocates nothing.
type lossListener Guard

// ClaimLost implements backend.LossListener.
func (l *lossListener) ClaimLost(cause error) { (*Guard)(l).lost(cause) }

// lost is told by the backend that the store no longer has the claim.
// The claim may have gone with its whole lease (revoked, expired), and a
// backend reports each claim's loss on its own - on etcd one watch event
// per claim, one after another - so lost also has the lease renewed at
// once: if the store no longer has it, every guard on it is poisoned
// together instead of each waiting for its own report.
func (g *Guard) lost(cause error) {
	if g.end(fmt.Errorf("%w: %w", ErrLeaseExpired, cause)) {
		g.client.wd.leaveLost(g.lease, g)
	}
}

// Unlock releases the lock. It blocks for at most one backend round trip,
// bounded by ctx and by a timeout of its own: a dead or cancelled ctx does
// not stop the release from being attempted.
//
// The release removes the guard's own claim only, compared by identity, so
// a late or retried Unlock never removes a later holder's claim. If the
// store cannot be reached, Unlock returns an error wrapping ErrUnavailable
// and the client keeps retrying the release in the background until it
// succeeds or the lease is gone, so the claim does not block the key while
// other guards keep the shared lease alive.
//
// Unlock is idempotent: on a guard already released (by Unlock or Close)
// it returns nil. Unlocking a guard that was poisoned still removes its
// claim if the store has it, and returns an error wrapping ErrLeaseExpired
// (every time) so the caller learns that the critical section was not
// protected to the end.
func (g *Guard) Unlock(ctx context.Context) error {
	ended := g.end(ErrUnlocked)
	if !ended {
		err := g.Err()
		if errors.Is(err, ErrUnlocked) {
			return nil
		}
		// Poisoned: the claim may outlive the local deadline on the store.
		g.client.release(ctx, g)
		return err
	}
	if g.timed {
		g.client.metrics.holdTime(time.Duration(g.client.wd.now() - g.acquired))
	}
	return g.client.release(ctx, g)
}
