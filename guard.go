package ashlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// A Guard is a held lock. It stays valid until Unlock, Close, or the moment
// its lease can no longer be trusted; after that it is ended for good and
// FencingToken refuses to hand out its token.
//
// Keep the Guard reachable for as long as the lock is needed, typically
// with defer g.Unlock(ctx). A Guard that becomes unreachable without Unlock
// is released when the garbage collector finds it, with a warning logged
// naming its key, and Go may collect a value right after its last use in
// the code, before the end of the enclosing function: a guard used only at
// the top of a critical section can be released before that section ends.
// A channel taken from Done before then still closes when that happens.
//
// All methods are safe for concurrent use.
type Guard struct {
	s *guardState
	// cleanup releases s if the Guard is collected without Unlock; Unlock
	// stops it.
	cleanup runtime.Cleanup
}

// guardState is a guard as the client sees it. Everything that refers to
// a guard from the inside (its lease's guard list, the backend's
// LossListener, wait and Do hooks, the watchdog) refers to the guardState,
// never to the Guard, so that the Guard becomes unreachable as soon as its
// user lets go of it and its cleanup can release the lock.
type guardState struct {
	client  *LockClient
	lease   *lease
	inLease guardLinks // place in lease.guards; guarded by watchdog.mu
	// acquired is when the guard was handed out, on the watchdog's clock
	// (see watchdog.now), for the hold-time metric; set only if timed.
	acquired int64

	listed bool // on lease.guards; guarded by watchdog.mu
	timed  bool // a metrics SDK recorded the acquisition; read-only after Acquire
	// counted: the guard was handed out and is counted in the held gauge;
	// whoever ends it takes it out again, exactly once. Guarded by mu.
	counted bool

	mu sync.Mutex
	// claim is set under mu once acquired; after Acquire returns only its
	// Value changes (SetValue, under mu). Its Key is the guard's key.
	claim backend.Claim
	err   error         // nil while valid
	done  chan struct{} // made on first Done call, closed by end
	onEnd func(error)   // cancel hook of a wait or of Do, run once by end
}

// dropped releases s, whose Guard was collected. It runs on the runtime's
// cleanup goroutine, so it must not block: a remote release is handed to
// the client's background retrier.
func dropped(s *guardState) {
	if !s.end(ErrUnlocked) {
		return // unlocked, closed or poisoned already
	}
	c := s.client
	c.log.Warn("ashlock: guard dropped without Unlock; releasing", "key", s.claim.Key, "token", s.claim.Token)
	s.recordHold()
	if c.local {
		_ = c.release(context.Background(), s)
		return
	}
	c.wd.leave(s.lease, s)
	c.wd.queueRelease(pendingRelease{lease: s.lease, claim: s.claim})
}

// Key returns the key the guard holds (or held); for LockAll, the first of
// its keys in sorted order.
func (g *Guard) Key() string { return g.s.claim.Key }

// Keys returns the keys the guard holds (or held): one for Lock, the sorted
// set for LockAll. The slice is the caller's.
func (g *Guard) Keys() []string {
	return append([]string(nil), g.s.claim.AllKeys()...)
}

// Permit returns the permit the guard holds, in 0..n-1 for a lock with
// WithPermits(n), and 0 for plain and shared locks. Every token issued for
// a permit is greater than the earlier tokens of that permit, so a pool of
// n resources is fenced per permit: use "key#permit" as the fence's
// resource name.
func (g *Guard) Permit() int { return g.s.claim.Permit }

// Shared reports whether the guard holds a shared lock.
func (g *Guard) Shared() bool { return g.s.claim.Shared }

// Value returns the value published with the claim: WithValue's, or the
// last one SetValue stored. The caller must not modify it.
func (g *Guard) Value() []byte {
	g.s.mu.Lock()
	defer g.s.mu.Unlock()
	return g.s.claim.Value
}

// SetValue replaces the value published with the claim, in one write that
// compares on the claim's identity, so it never changes another claim. It
// blocks for one backend round trip, bounded by ctx.
//
// A guard that is no longer valid returns its Err and changes nothing. If
// the store no longer has the claim (even if the guard has not heard yet)
// SetValue poisons the guard and returns an error wrapping
// ErrLeaseExpired. A value over 64 KiB, or over 512 KiB for all the keys
// of a LockAll together, is ErrInvalidConfig. Other errors
// wrap ErrUnavailable; the value may or may not have been written then.
// Safe for concurrent use; concurrent SetValues are applied in some order.
func (g *Guard) SetValue(ctx context.Context, v []byte) error {
	if err := backend.CheckValue(v, len(g.s.claim.AllKeys())); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	s := g.s
	claim, err := s.check()
	if err != nil {
		return err
	}
	v = append([]byte{}, v...)
	if err := s.client.be.SetValue(ctx, claim, v); err != nil {
		if errors.Is(err, ErrLeaseExpired) {
			s.lost(err)
			if _, err := s.check(); errors.Is(err, ErrUnlocked) {
				return err // released meanwhile, which removed the claim
			}
			return fmt.Errorf("%w: set value of %q: the claim is gone", ErrLeaseExpired, claim.Key)
		}
		return withCtx(ctx, err)
	}
	s.mu.Lock()
	if s.err == nil {
		s.claim.Value = v
	}
	s.mu.Unlock()
	return nil
}

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
	c, err := g.s.check()
	return c.Token, err
}

// Stamp returns the hybrid-logical-clock stamp of the acquisition. The
// boolean is false when LockConfig.Stamps is off.
func (g *Guard) Stamp() (Timestamp, bool) {
	g.s.mu.Lock()
	defer g.s.mu.Unlock()
	return g.s.claim.Stamp, g.s.client.clock != nil
}

// Deadline returns the end of the guard's local validity as it stands now:
// the watchdog moves it forward with every acknowledged renewal. After the
// guard has ended it returns the time it ended at the latest.
func (g *Guard) Deadline() time.Time {
	return g.s.client.wd.at(g.s.lease.deadline.Load())
}

// Claim returns the backend's record of the claim, for backend-specific
// helpers such as the etcd backend's IsOwner comparison. It fails like
// FencingToken once the guard has ended.
func (g *Guard) Claim() (backend.Claim, error) { return g.s.check() }

// Done returns a channel that is closed when the guard stops being valid:
// poisoned (Err returns ErrLeaseExpired) or released (ErrUnlocked).
func (g *Guard) Done() <-chan struct{} {
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		// Made lazily: most guards are never asked.
		s.done = make(chan struct{})
		if s.err != nil {
			close(s.done) // ended before anyone asked: end did not see it
		}
	}
	return s.done
}

// Err returns nil while the guard is valid, and ErrLeaseExpired or
// ErrUnlocked (possibly wrapped with detail) once it has ended.
func (g *Guard) Err() error {
	_, err := g.s.check()
	return err
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
	g.cleanup.Stop()
	return g.s.unlock(ctx)
}

// unlock is Unlock on the guard's state.
func (s *guardState) unlock(ctx context.Context) error {
	if !s.client.wd.trusted(s.lease) {
		// The deadline has passed and the scheduler has not ended the
		// guard yet: end it as the scheduler will, so that the caller
		// learns the section outran its lease, as check already says.
		s.end(errDeadlinePassed)
	}
	if !s.end(ErrUnlocked) {
		_, err := s.check()
		if errors.Is(err, ErrUnlocked) {
			return nil
		}
		// Poisoned: the claim may outlive the local deadline on the store.
		s.client.release(ctx, s)
		return err
	}
	s.recordHold()
	return s.client.release(ctx, s)
}

// check returns the claim, or why the guard no longer holds it.
func (s *guardState) check() (backend.Claim, error) {
	s.mu.Lock()
	c, err := s.claim, s.err
	s.mu.Unlock()
	if err == nil && !s.client.wd.trusted(s.lease) {
		// The deadline has passed but the scheduler has not run yet. Refuse
		// now; the scheduler will end the guard in a moment.
		err = ErrLeaseExpired
	}
	if err != nil {
		return backend.Claim{}, err
	}
	return c, nil
}

// recordHold records the hold time of a guard that has just been released.
func (s *guardState) recordHold() {
	if s.timed {
		s.client.metrics.holdTime(time.Duration(s.client.wd.now() - s.acquired))
	}
}

// end ends the guard with err unless it has already ended. It reports
// whether this call ended it.
func (s *guardState) end(err error) bool {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false
	}
	s.err = err
	if s.done != nil {
		close(s.done)
	}
	hook := s.onEnd
	s.onEnd = nil
	counted := s.counted
	s.counted = false
	s.mu.Unlock()
	if hook != nil {
		hook(err)
	}
	if counted {
		s.client.metrics.held(-1)
		if !errors.Is(err, ErrUnlocked) {
			// A held guard lost its lease; acquisitions that never handed
			// their guard out are reported by Acquire instead. Its claim
			// was written before it was counted, under mu: read-only now.
			s.client.log.Warn("ashlock: guard poisoned", "key", s.claim.Key, "token", s.claim.Token, "cause", err)
		}
	}
	return true
}

// setOnEnd arranges for f to run once, with the cause, when the guard ends
// (at once if it already has), until clearOnEnd.
func (s *guardState) setOnEnd(f func(error)) {
	s.mu.Lock()
	if err := s.err; err != nil {
		s.mu.Unlock()
		f(err)
		return
	}
	s.onEnd = f
	s.mu.Unlock()
}

func (s *guardState) clearOnEnd() {
	s.mu.Lock()
	s.onEnd = nil
	s.mu.Unlock()
}

// lossListener is the guard seen as the backend's LossListener. It is a
// distinct unexported type so that converting to it allocates nothing.
type lossListener guardState

// ClaimLost implements backend.LossListener.
func (l *lossListener) ClaimLost(cause error) { (*guardState)(l).lost(cause) }

// lost is told by the backend that the store no longer has the claim.
// The claim may have gone with its whole lease (revoked, expired), and a
// backend reports each claim's loss on its own - on etcd one watch event
// per claim, one after another - so lost also has the lease renewed at
// once: if the store no longer has it, every guard on it is poisoned
// together instead of each waiting for its own report.
func (s *guardState) lost(cause error) {
	// A backend's cause usually wraps ErrLeaseExpired already: wrap only
	// one that does not, so that the guard's error and the warning name
	// the sentinel once.
	if !errors.Is(cause, ErrLeaseExpired) {
		cause = fmt.Errorf("%w: %w", ErrLeaseExpired, cause)
	}
	if s.end(cause) {
		s.client.wd.leaveLost(s.lease, s)
	}
}

// guardContext is the context Do and Election.Run hand to their function:
// cancelled, with cause ErrLeaseExpired, the moment the guard ends. The
// watchdog's timer cancels it at the local deadline, but a process that
// resumes from a pause longer than its lease runs its goroutines in no set
// order, so the function could look at its context before that timer has
// fired. Err therefore checks the guard's deadline itself and, if it has
// passed, cancels the context before answering: a function that checks
// Err before acting never acts past the deadline, and Done is closed by
// the time Err reports the end, as the context contract requires.
// Contexts derived from it are cancelled with it but check no deadline of
// their own.
type guardContext struct {
	context.Context
	cancel context.CancelCauseFunc
	s      *guardState
}

// Err returns the context's error, after ending it if the guard is no
// longer valid by the local clock.
func (c *guardContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if _, err := c.s.check(); err != nil {
		c.cancel(err)
	}
	return c.Context.Err()
}
