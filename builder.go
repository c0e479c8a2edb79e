package ashlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/google/uuid"

	"github.com/ash-lock/ashlock/backend"
)

// A LockBuilder describes a lock on one key (Lock) or on a set of keys
// (LockAll): exclusive by default, shared with Shared, counted with
// WithPermits. Acquire, TryAcquire and Do take it. Setters never fail and return a new builder, leaving the
// receiver unchanged, so a builder can be kept and reused (for example one
// per key, built once). Every problem with the key or the options is
// reported, all at once, by the call that takes the lock.
//
// A LockBuilder is safe for concurrent use: nothing mutates it.
type LockBuilder struct {
	client      *LockClient
	key         string
	keys        []string // LockAll's keys, sorted (not nil, even if none); nil for Lock
	owner       string
	value       []byte
	permits     int // as given to WithPermits; 0 when not set (one)
	shared      bool
	ttl         time.Duration
	interval    time.Duration
	ttlSet      bool
	intervalSet bool
	permitsSet  bool
	fair        bool
}

// WithTTL sets the lease TTL: how long the lock survives its holder's
// process dying without a release. d <= 0 makes the acquisition fail with
// ErrInvalidTTL. Backends may round it up (etcd: whole seconds).
func (b *LockBuilder) WithTTL(d time.Duration) *LockBuilder {
	return b.with(func(nb *LockBuilder) { nb.ttl, nb.ttlSet = d, true })
}

// WithFairness chooses between strict FIFO waiting (true, the default) and
// not queueing (false): a non-fair acquisition takes no place in line and
// gets the key only once no fair acquisition is queued. It leaves nothing
// in the backend while it waits, but can wait indefinitely under steady
// fair contention. Both kinds exclude each other.
func (b *LockBuilder) WithFairness(fair bool) *LockBuilder {
	return b.with(func(nb *LockBuilder) { nb.fair = fair })
}

// WithWatchdogInterval sets how often the lease is renewed; it must be
// shorter than the TTL (else ErrInvalidConfig). By default it is a third
// of the TTL. However long it is, each renewal is due at least a safety
// margin (about a tenth of the TTL, at least 100ms) before the guard's
// local deadline, and one that fails is tried again before that margin
// starts, so that an interval close to the TTL still keeps the lease.
func (b *LockBuilder) WithWatchdogInterval(d time.Duration) *LockBuilder {
	return b.with(func(nb *LockBuilder) { nb.interval, nb.intervalSet = d, true })
}

// WithOwner sets the label Inspect shows for this holder (default
// "host:pid"). At most 256 bytes of valid UTF-8.
func (b *LockBuilder) WithOwner(label string) *LockBuilder {
	return b.with(func(nb *LockBuilder) { nb.owner = label })
}

// Shared makes the lock a shared (read) lock: shared holders of a key hold
// it together, and exclude exclusive ones. Waiting stays FIFO: a shared
// request queued behind an exclusive one waits for it, so readers never
// starve a writer, and a writer's release admits every reader queued up to
// the next writer at once. Shared with WithPermits(n > 1) is
// ErrInvalidConfig. A shared guard's token is checked with
// fencing.Fence.AdmitShared.
func (b *LockBuilder) Shared() *LockBuilder {
	return b.with(func(nb *LockBuilder) { nb.shared = true })
}

// WithPermits makes the lock a counted lock (a semaphore): at most n guards
// hold the key at once, each with its own permit number in 0..n-1 (see
// Guard.Permit), so that a pool of n resources can be fenced per permit.
// n must be in 1..1024 (else ErrInvalidConfig); the default is 1. Every
// request queued on a key must use the same n: a request with another n
// fails with ErrPermitMismatch and leaves nothing behind.
func (b *LockBuilder) WithPermits(n int) *LockBuilder {
	return b.with(func(nb *LockBuilder) { nb.permits, nb.permitsSet = n, true })
}

// WithValue publishes v with the claim: Inspect's Holders show it, and the
// guard can change it with SetValue. At most 64 KiB, and for LockAll at
// most 512 KiB for all keys together (the value is stored at every key, so
// 64 KiB on up to 8 keys, 8 KiB on 64); else ErrInvalidConfig. The builder
// keeps its own copy.
func (b *LockBuilder) WithValue(v []byte) *LockBuilder {
	return b.with(func(nb *LockBuilder) { nb.value = append([]byte{}, v...) })
}

// with returns a copy of b changed by set: setters leave their receiver
// as it was.
func (b *LockBuilder) with(set func(nb *LockBuilder)) *LockBuilder {
	nb := *b
	set(&nb)
	return &nb
}

// request validates the builder and returns the request it makes (each
// attempt adds its claim ID, lease, Wait and OnLost) with the effective TTL
// and renewal interval, or every problem found.
//
// The root checks the request although every Backend checks it again: a
// bad one then costs no lease grant, its problems are reported with the
// TTL's and the interval's all at once, and a Backend passed to
// ConnectWith that does not check (the conformance suite does not test
// bad input) never sees one.
func (b *LockBuilder) request(req *backend.AcquireRequest) (ttl, interval time.Duration, err error) {
	c := b.client
	*req = backend.AcquireRequest{Key: b.key, Keys: b.keys, Shared: b.shared, Permits: b.permits, Value: b.value,
		Owner: b.owner, Fair: b.fair, Stamp: c.stampFn}
	var errs []error
	if b.permitsSet && b.permits == 0 {
		// The request reads 0 as one permit; the builder refuses it.
		errs = append(errs, fmt.Errorf("%w: 0 permits, not in 1..%d", ErrInvalidConfig, backend.MaxPermits))
	}
	if err := backend.CheckRequest(req); err != nil {
		errs = append(errs, err)
	}
	if len(req.Keys) == 1 {
		req.Keys = nil // LockAll of one key is checked as one (no permits) and taken as a plain Lock
	}
	req.Owner = cmp.Or(req.Owner, c.owner)
	ttl, interval, errs = b.timing(&c.cfg, errs)
	return ttl, interval, errors.Join(errs...)
}

// timing returns the lease TTL and renewal interval of b: its own, else
// cfg's, else the defaults (30s, a third of the TTL), with their problems
// appended to errs. Connect checks a LockConfig with an empty builder.
func (b *LockBuilder) timing(cfg *LockConfig, errs []error) (ttl, interval time.Duration, _ []error) {
	ttl, interval = cmp.Or(cfg.DefaultTTL, defaultTTL), cfg.WatchdogInterval
	if b.ttlSet {
		ttl = b.ttl
	}
	if b.intervalSet {
		interval = b.interval
	}
	if ttl <= 0 {
		errs = append(errs, fmt.Errorf("%w: %v", ErrInvalidTTL, ttl))
	}
	switch {
	case interval < 0 || interval == 0 && b.intervalSet:
		errs = append(errs, fmt.Errorf("%w: watchdog interval %v is not positive", ErrInvalidConfig, interval))
	case interval == 0:
		interval = ttl / 3
	case interval >= ttl && ttl > 0:
		errs = append(errs, fmt.Errorf("%w: watchdog interval %v is not below the TTL %v", ErrInvalidConfig, interval, ttl))
	}
	return ttl, interval, errs
}

// Acquire takes the lock, waiting as long as ctx allows. It waits without
// polling: the backend wakes it when its turn comes (fair: in the order the
// requests arrived; see WithFairness).
//
// On success the returned Guard holds the lock until Unlock, Close or the
// loss of its lease. On failure nothing is held and nothing is left queued
// in the backend. Errors: ErrInvalidKey, ErrInvalidTTL, ErrInvalidConfig
// (all problems at once), ErrPermitMismatch, ErrClosed, ErrUnavailable,
// ErrLeaseExpired, or -
// when ctx ends while waiting - an error for which errors.Is(err, ctx.Err())
// holds and which is not ErrLocked.
func (b *LockBuilder) Acquire(ctx context.Context) (*Guard, error) { return b.guard(ctx, true) }

// TryAcquire takes the lock if it is free now and fails with ErrLocked
// otherwise, leaving nothing behind. It blocks for about one backend round
// trip. Other errors are those of Acquire.
func (b *LockBuilder) TryAcquire(ctx context.Context) (*Guard, error) { return b.guard(ctx, false) }

// guard acquires the lock and hands it out as a Guard that releases it if
// the Guard is dropped (see dropped).
func (b *LockBuilder) guard(ctx context.Context, wait bool) (*Guard, error) {
	s, err := b.acquire(ctx, wait)
	if err != nil {
		return nil, err
	}
	g := &Guard{s: s}
	g.cleanup = runtime.AddCleanup(g, dropped, s)
	return g, nil
}

// Do acquires the lock, runs fn while holding it, and unlocks when fn
// returns (or panics). fn receives the fencing token and a context derived
// from ctx that is cancelled the moment the guard is poisoned, with
// context.Cause returning ErrLeaseExpired (ErrUnlocked if the client is
// closed meanwhile); fn must stop writing when it is.
//
// Do returns the acquisition's error, else fn's error. If fn returns nil
// but the guard was poisoned before fn returned, Do returns an error
// wrapping ErrLeaseExpired: fn's work may not have been protected to the
// end. A failed release is retried in the background and logged; it does
// not change Do's result.
func (b *LockBuilder) Do(ctx context.Context, fn func(ctx context.Context, token uint64) error) error {
	// The guard never leaves Do, which releases it itself: no Guard, and
	// so no cleanup for a dropped one, is needed.
	s, err := b.acquire(ctx, true)
	if err != nil {
		return err
	}
	ran, ferr, after := s.hold(ctx, fn)
	switch {
	case !ran:
		return after
	case ferr != nil:
		return ferr
	case errors.Is(after, ErrLeaseExpired):
		return after
	}
	return nil
}

// hold runs fn with s's token and a context derived from ctx that ends the
// moment the guard does, then releases s (also if fn panics), with a
// context that the end of ctx does not cut short (unlock bounds it). It
// reports whether fn ran, fn's error, and why s was no longer valid when
// fn returned (nil if it was); fn is not called if s or ctx has ended
// already, and after then says why.
func (s *guardState) hold(ctx context.Context, fn func(context.Context, uint64) error) (ran bool, ferr, after error) {
	defer s.unlock(context.WithoutCancel(ctx)) //nolint:errcheck // a failed release is logged and retried by the client
	gctx, cancel := context.WithCancelCause(ctx)
	fctx := &guardContext{Context: gctx, cancel: cancel, s: s}
	defer cancel(nil)
	// From here the guard's end cancels fctx at once, from whichever
	// goroutine ends it (the watchdog at the local deadline, the backend's
	// loss report, Close); if it has ended already, setOnEnd cancels now.
	s.setOnEnd(cancel)
	claim, err := s.check()
	if err == nil {
		err = fctx.Err()
	}
	if err != nil {
		return false, nil, err
	}
	ferr = fn(fctx, claim.Token)
	s.clearOnEnd()
	_, after = s.check()
	return true, ferr, after
}

func (b *LockBuilder) acquire(ctx context.Context, wait bool) (*guardState, error) {
	c := b.client
	if c.closed.Load() {
		return nil, ErrClosed
	}
	var req backend.AcquireRequest
	ttl, interval, err := b.request(&req)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var start time.Time // zero: no metrics SDK, skip the clock reads
	timed := c.metrics.timing()
	if timed {
		start = time.Now()
	}
	// A lease can be lost between being picked from the pool and the claim
	// being written (revoked, expired during a partition). Each retry uses a
	// lease the watchdog has just confirmed or a fresh one, so a client
	// recovers by itself; the bound stops a store that keeps dropping leases
	// from looping forever.
	for attempt := 1; ; attempt++ {
		s, err := c.acquireOnce(ctx, &req, leaseKey{ttl, interval}, wait, timed)
		if err == nil {
			c.metrics.acquired(start, wait)
			return s, nil
		}
		if errors.Is(err, ErrLeaseExpired) && attempt < 3 && ctx.Err() == nil && !c.closed.Load() {
			continue
		}
		c.metrics.failed(start, err)
		return nil, err
	}
}

// acquireOnce makes one attempt at req with one lease. timed says whether
// a metrics SDK records durations, as decided once per Acquire.
func (c *LockClient) acquireOnce(ctx context.Context, req *backend.AcquireRequest, key leaseKey, wait, timed bool) (*guardState, error) {
	s := &guardState{client: c}
	l, err := c.wd.join(ctx, key, s)
	if err != nil {
		return nil, withCtx(ctx, err)
	}
	s.lease = l

	req.ID, req.Lease, req.Wait, req.OnLost = "", l.id, wait, (*lossListener)(s)
	if !c.namesClaims {
		// A fresh name per attempt; a backend.ClaimNamer names the claim
		// itself and would not read it.
		req.ID = uuid.NewString()
	}
	actx := ctx
	if wait && !c.local {
		// While waiting, the guard is registered with its lease: if the lease
		// is poisoned or the client closes, end the wait now instead of when
		// the caller's context ends. (Both also revoke the lease, which ends
		// the wait on a backend.Local at once; a remote store may be
		// unreachable, hence the context.)
		var cancel context.CancelCauseFunc
		actx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		s.setOnEnd(cancel)
		defer s.clearOnEnd()
	}
	claim, err := c.be.Acquire(actx, *req)
	if err != nil {
		c.wd.leave(l, s)
		s.end(ErrUnlocked)
		return nil, c.acquireError(ctx, l, err)
	}

	s.mu.Lock()
	s.claim = claim
	if timed {
		s.acquired, s.timed = c.wd.now(), true
	}
	// Decided under s.mu, which end takes too: either s is counted as held
	// here and whoever ends it later (poisoning, Unlock, Close, the drop
	// cleanup) uncounts it, or it ended first and is never counted.
	// s.err is set if the lease was poisoned (or the client closed) since
	// s joined it. A deadline that has passed without the scheduler having
	// run yet is not checked here: FencingToken and Claim check it on every
	// use, so such a guard can never hand out its token, and the scheduler
	// ends it in a moment.
	ok := s.err == nil
	if ok {
		s.counted = true
		c.metrics.held(1)
	}
	s.mu.Unlock()
	if !ok {
		// The lease was lost (or the client closed) while the backend was
		// granting the claim: s has ended already, uncounted and
		// unreported. Take the claim back and report the loss.
		_ = c.release(ctx, s)
		if c.closed.Load() {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("%w: lease lost while acquiring %q", ErrLeaseExpired, req.Key)
	}
	return s, nil
}

// acquireError turns a failed backend Acquire into the caller's error.
func (c *LockClient) acquireError(ctx context.Context, l *lease, err error) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if ctx.Err() == nil && errors.Is(err, context.Canceled) {
		// Our own wait context was cancelled: the lease was poisoned.
		return fmt.Errorf("%w: lease lost while waiting", ErrLeaseExpired)
	}
	if errors.Is(err, ErrLeaseExpired) {
		// The backend no longer knows the lease or dropped the claim. Ask
		// whether the lease still exists and poison it at once if not, so
		// that the next attempt gets a fresh lease. Bounded by ctx, the
		// Acquire's: once that has ended there is no next attempt.
		cctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		if _, kerr := c.be.KeepAlive(cctx, l.id); errors.Is(kerr, ErrLeaseExpired) {
			c.wd.loseLease(l, kerr)
		}
		cancel()
	}
	return withCtx(ctx, err)
}
