package memory

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// ErrInvalidTTL is returned by Grant for a TTL that is zero or negative.
var ErrInvalidTTL = errors.New("memory: lease TTL must be positive")

// Option configures a Backend in New.
type Option func(*Backend)

// WithClock makes the Backend read time from c and schedule lease expiries
// and renewal delays on it. nil means the real clock (the time package),
// which is also the default.
func WithClock(c Clock) Option {
	return func(b *Backend) {
		if c != nil {
			b.clock = c
		}
	}
}

// Backend is an in-process lock store implementing backend.Backend. Create
// one with New; the zero value is not usable. All methods are safe for
// concurrent use.
type Backend struct {
	clock Clock
	done  chan struct{} // closed by Close; wakes every waiting Acquire

	// notifying counts running OnLost deliveries so that Close can wait
	// for them. Go is only called under mu while !closed, so every Go
	// happens before Close's Wait.
	notifying sync.WaitGroup

	mu     sync.Mutex
	closed bool
	rev    uint64 // last token issued; one counter for every key
	lastID backend.LeaseID
	leases map[backend.LeaseID]*lease
	keys   map[string]*keyState
	parked *keyState // the one idle key left in keys; see parkLocked
	free   []*claim  // recycled claims; see newClaimLocked
	// stamps is the highest stamp recorded per key. It outlives the key's
	// keyState on purpose: the next holder must see it even after the key
	// was free for a while. It only grows with keys that were stamped.
	stamps map[string]backend.Timestamp

	renewErr   error         // FailRenewals
	obs        *observers    // nil until the first Observe (inspect.go)
	renewDelay time.Duration // DelayRenewals
}

var _ backend.Backend = (*Backend)(nil)

// New returns an empty, open Backend. It starts no goroutine.
func New(opts ...Option) *Backend {
	b := &Backend{
		clock:  realClock{},
		done:   make(chan struct{}),
		leases: make(map[backend.LeaseID]*lease),
		keys:   make(map[string]*keyState),
		stamps: make(map[string]backend.Timestamp),
	}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Close stops every lease timer, makes blocked Acquires and hanging
// KeepAlives return backend.ErrClosed, and waits for OnLost callbacks
// already being delivered to return; it must therefore not be called from
// an OnLost callback. Claims are neither released nor reported lost. Every
// later call except Close returns an error wrapping backend.ErrClosed, and
// the fault hooks do nothing; a second Close returns nil. Once Close has
// returned no OnLost is called and the Backend has no goroutine left, save
// a lease timer that fired at that very moment and returns at once.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	for _, l := range b.leases {
		l.timer.Stop()
	}
	b.mu.Unlock()
	b.notifying.Wait()
	return nil
}

// lostCall is one OnLost callback owed to a holder.
type lostCall struct {
	f     backend.LossListener
	cause error
}

// notifyLocked delivers OnLost callbacks on a goroutine of the Backend's:
// never on the caller's, which may hold its own locks (a client revoking a
// lease must not have its OnLost run inside Revoke). One goroutine per loss
// event, not per claim; it lives only as long as the callbacks, which must
// not block.
func (b *Backend) notifyLocked(calls []lostCall) {
	if len(calls) == 0 || b.closed {
		return
	}
	b.notifying.Go(func() {
		for _, c := range calls {
			c.f.ClaimLost(c.cause)
		}
	})
}

// errClosed is the error of any call on a closed Backend.
func errClosed(op string) error {
	return fmt.Errorf("memory: %s: %w", op, backend.ErrClosed)
}

var _ backend.Local = (*Backend)(nil)

// Local marks the Backend as in-process (backend.Local): its Release and
// Revoke never block, and Revoke ends the waits on the revoked lease, so the
// client skips the timeouts it puts around calls to remote stores.
func (b *Backend) Local() {}

var _ backend.ClaimNamer = (*Backend)(nil)

// NamesClaims marks the Backend as naming its claims itself
// (backend.ClaimNamer). A request without an ID gets the name of the claim
// record that holds it: a UUID made when the record is first used and kept
// while the record is recycled, so it is unique among live claims, and a
// later claim may reuse it once this one is gone (its token differs). The
// client then makes no name per acquisition.
func (b *Backend) NamesClaims() {}
