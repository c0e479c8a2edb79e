package ashlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// The watchdog owns a client's leases: it grants them on demand, renews
// each from one scheduler goroutine, and poisons every guard of a lease the
// instant the lease can no longer be trusted.
//
// The rule (guarantee 3): a lease is trusted until
//
//	send time of the last acknowledged renewal + granted TTL - margin
//
// measured on the monotonic clock. The scheduler keeps a timer on that
// deadline that does not depend on any renewal returning, so a renewal call
// that hangs (partition, frozen store) cannot keep a guard alive.
type watchdog struct {
	be      backend.Backend
	log     *slog.Logger
	metrics *metrics
	epoch   time.Time // monotonic origin for lease.deadline
	// bg is the parent of every call the client makes on its own behalf
	// in the background (revokes, retried releases); Close cancels it.
	bg       context.Context
	cancelBG context.CancelFunc

	mu struct {
		sync.Mutex
		pool     map[leaseKey]*lease
		closed   bool
		releases []pendingRelease // failed releases to retry (release.go)
		retrying bool             // a retryReleases goroutine runs
	}
	wake chan struct{} // buffered(1): nudges the scheduler to recompute
	stop chan struct{} // closed by close
	wg   sync.WaitGroup
}

func newWatchdog(be backend.Backend, log *slog.Logger, m *metrics) *watchdog {
	wd := &watchdog{
		be:      be,
		log:     log,
		metrics: m,
		epoch:   time.Now(),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
	wd.bg, wd.cancelBG = context.WithCancel(context.Background())
	wd.mu.pool = make(map[leaseKey]*lease)
	wd.wg.Go(wd.run)
	return wd
}

// now returns the monotonic time since the epoch, the unit of lease.deadline.
func (wd *watchdog) now() int64 { return int64(time.Since(wd.epoch)) }

// at converts a lease.deadline value back to a time.Time.
func (wd *watchdog) at(ns int64) time.Time { return wd.epoch.Add(time.Duration(ns)) }

// notify sends a wake-up on ch, a channel of capacity 1, unless one is
// pending already.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// trusted reports whether l's local deadline is still ahead. Safe without
// the lock: FencingToken calls it on every use.
func (wd *watchdog) trusted(l *lease) bool { return wd.now() < l.deadline.Load() }

// join registers g with a granted lease for key, granting one if the pool
// has none. It blocks for at most one Grant. On failure g is not registered.
func (wd *watchdog) join(ctx context.Context, key leaseKey, g *guardState) (*lease, error) {
	for {
		wd.mu.Lock()
		if wd.mu.closed {
			wd.mu.Unlock()
			return nil, ErrClosed
		}
		l := wd.mu.pool[key]
		if l != nil && l.granted {
			// The common case, decided under one lock: a live lease of
			// this kind is in the pool.
			l.guards.push(g)
			l.idleSince = time.Time{}
			wd.mu.Unlock()
			return l, nil
		}
		creator := l == nil
		if creator {
			l = &lease{key: key, ready: make(chan struct{})}
			wd.mu.pool[key] = l
		}
		wd.mu.Unlock()

		if creator {
			wd.grant(ctx, l)
		} else {
			select {
			case <-l.ready:
			case <-ctx.Done():
				return nil, errors.Join(ErrUnavailable, ctx.Err())
			}
		}
		if l.grantErr != nil && creator {
			return nil, l.grantErr
		}
		// Look again: the lease is now in the pool, granted, unless it was
		// poisoned meanwhile or someone else's grant failed (perhaps on
		// their own context); then this caller may become the creator.
	}
}

// grant asks the backend for l's lease and publishes the result.
func (wd *watchdog) grant(ctx context.Context, l *lease) {
	sent := time.Now()
	got, err := wd.be.Grant(ctx, l.key.ttl)
	if err == nil && got.TTL <= 0 {
		err = fmt.Errorf("%w: backend granted a non-positive TTL %v", ErrUnavailable, got.TTL)
	}
	wd.mu.Lock()
	if err == nil && wd.mu.closed {
		// Close ran while the grant was in flight and could not revoke a
		// lease it did not know; do it here, bounded, before reporting.
		wd.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		_ = wd.be.Revoke(rctx, got.ID)
		cancel()
		wd.mu.Lock()
		err = ErrClosed
	}
	if err != nil {
		l.grantErr = err
		wd.dropLocked(l)
	} else {
		l.id, l.ttl = got.ID, got.TTL
		l.granted = true
		l.deadline.Store(int64(sent.Add(got.TTL - margin(got.TTL)).Sub(wd.epoch)))
		l.nextRenew = sent.Add(renewAfter(l.key.interval, got.TTL))
		// No guard has joined yet; count the linger from the grant so that
		// the scheduler does not take the new lease for an idle one.
		l.idleSince = time.Now()
	}
	close(l.ready)
	wd.mu.Unlock()
	notify(wd.wake)
}

// leaveLost unregisters g, whose claim vanished, from l, and has l renewed
// now rather than at its next interval: the claim may have gone with the
// lease itself, and a renewal is how the client learns that (the store
// refuses it, and tick poisons every guard of l). A renewal already in
// flight may have been answered before the loss, so another follows it.
// It does not block.
func (wd *watchdog) leaveLost(l *lease, g *guardState) {
	wd.mu.Lock()
	l.guards.remove(g)
	switch {
	case l.lost:
	case l.renewing:
		l.recheck = true
	default:
		l.nextRenew = time.Time{}
	}
	wd.mu.Unlock()
	notify(wd.wake)
}

// leave unregisters g from its lease. The lease's idleness is noticed by
// the scheduler on its next tick (it ticks at least once per renewal
// interval), which starts the linger then: no clock read or wake-up on the
// release path.
func (wd *watchdog) leave(l *lease, g *guardState) {
	wd.mu.Lock()
	l.guards.remove(g)
	wd.mu.Unlock()
}

// run is the scheduler: one goroutine per client, whatever the number of
// guards. It sleeps until the earliest renewal, deadline or linger end.
func (wd *watchdog) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := wd.tick()
		if next.IsZero() {
			timer.Stop()
		} else {
			timer.Reset(time.Until(next))
		}
		select {
		case <-timer.C:
		case <-wd.wake:
		case <-wd.stop:
			return
		}
	}
}

// tick handles every lease that is due and returns when it next needs to
// run (zero: nothing scheduled).
func (wd *watchdog) tick() time.Time {
	var expired, idle []*lease
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}

	wd.mu.Lock()
	if wd.mu.closed {
		wd.mu.Unlock()
		return time.Time{}
	}
	now := time.Now()
	for _, l := range wd.mu.pool {
		if !l.granted {
			continue // grant in flight; grant wakes the scheduler when done
		}
		deadline := wd.at(l.deadline.Load())
		switch {
		case !now.Before(deadline):
			wd.dropLocked(l)
			expired = append(expired, l)
		// An unused lease is kept for one TTL before it is revoked, so
		// that acquire/release cycles do not pay a grant each time.
		case l.guards.n == 0 && !l.idleSince.IsZero() && !now.Before(l.idleSince.Add(l.ttl)):
			wd.dropLocked(l)
			idle = append(idle, l)
		default:
			if l.guards.n == 0 && l.idleSince.IsZero() {
				l.idleSince = now // first tick to see it unused
			}
			if !l.renewing && !now.Before(l.nextRenew) {
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				l.renewing, l.cancelRenew = true, cancel
				wd.wg.Go(func() { wd.renew(ctx, cancel, l) })
			}
			earliest(deadline)
			if !l.renewing {
				earliest(l.nextRenew)
			}
			if l.guards.n == 0 {
				earliest(l.idleSince.Add(l.ttl))
			}
		}
	}
	wd.mu.Unlock()

	for _, l := range expired {
		wd.poison(l, errDeadlinePassed)
	}
	for _, l := range idle {
		wd.revokeAsync(l)
	}
	return next
}

// renew sends one keep-alive for l. Its context ends at l's deadline: past
// that, the answer no longer matters because the scheduler has already
// poisoned the lease.
func (wd *watchdog) renew(ctx context.Context, cancel context.CancelFunc, l *lease) {
	defer cancel()
	sent := time.Now()
	ttl, err := wd.be.KeepAlive(ctx, l.id)
	wd.metrics.renewal(err)

	wd.mu.Lock()
	l.renewing = false
	l.cancelRenew = nil
	now := time.Now()
	switch {
	case l.lost:
		// Poisoned or revoked while the call was in flight: a late success
		// must not revive it.
	case err == nil && ttl > 0:
		// The store counts the new TTL from no earlier than when we sent the
		// request, so sent + ttl - margin is a safe local deadline.
		// A lease whose deadline passed while the call was in flight stays
		// expired, renewed or not: its guards have refused their tokens
		// since (check), and a guard's validity only ever ends. The
		// scheduler poisons it on its next tick.
		d := int64(sent.Add(ttl - margin(ttl)).Sub(wd.epoch))
		if old := l.deadline.Load(); int64(now.Sub(wd.epoch)) < old && d > old {
			l.deadline.Store(d)
			wd.metrics.renewMargin(wd.at(d).Sub(now))
		}
		l.nextRenew = sent.Add(renewAfter(l.key.interval, ttl))
	case err == nil || errors.Is(err, backend.ErrLeaseExpired):
		// The store says the lease is gone: stop trusting it now rather than
		// at the deadline.
		l.deadline.Store(wd.now())
	default:
		// Transient failure: retry soon, and no later than the start of
		// the deadline's margin (where renewals are due, see renewAfter);
		// inside it, at a quarter of the time left, so that a store back
		// just before the deadline still renews. The deadline stands.
		until := wd.at(l.deadline.Load()).Sub(now)
		retry := min(l.key.interval/4, until-margin(l.ttl))
		if retry <= 0 {
			retry = until / 4
		}
		l.nextRenew = now.Add(max(retry, 10*time.Millisecond))
		wd.log.Debug("ashlock: lease renewal failed", "lease", int64(l.id), "err", err)
	}
	if l.recheck {
		// A claim vanished while this renewal was in flight, perhaps after
		// etcd answered it: ask again (see leaveLost).
		l.recheck = false
		l.nextRenew = time.Time{}
	}
	wd.mu.Unlock()
	notify(wd.wake)
}

// errDeadlinePassed is why a guard ends at its lease's local deadline.
var errDeadlinePassed = fmt.Errorf("%w: no renewal acknowledged within the lease's local deadline", ErrLeaseExpired)

// poison ends every guard of l with cause and revokes the lease in the
// background so that its claims stop blocking other clients at once.
func (wd *watchdog) poison(l *lease, cause error) {
	wd.mu.Lock()
	guards := l.guards.drain()
	if c := l.cancelRenew; c != nil {
		c()
	}
	wd.mu.Unlock()

	wd.metrics.leaseLost()
	for _, g := range guards {
		g.end(cause)
	}
	wd.revokeAsync(l)
}

// revokeAsync revokes l with a bounded context of its own, unless the
// watchdog has closed: Close waits for the goroutines it knows of, so none
// may start after it (l's claims then end with its TTL).
func (wd *watchdog) revokeAsync(l *lease) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.mu.closed {
		return
	}
	wd.wg.Go(func() {
		ctx, cancel := context.WithTimeout(wd.bg, cleanupTimeout)
		defer cancel()
		if err := wd.be.Revoke(ctx, l.id); err != nil {
			wd.log.Debug("ashlock: lease revoke failed", "lease", int64(l.id), "err", err)
		}
	})
}

// loseLease is called when something other than the scheduler learns that
// l is gone (an Acquire failed with ErrLeaseExpired and a check confirmed
// it). It poisons l at once.
func (wd *watchdog) loseLease(l *lease, cause error) {
	wd.mu.Lock()
	dropped := wd.dropLocked(l)
	wd.mu.Unlock()
	if dropped {
		wd.poison(l, cause)
	}
}

// dropLocked marks l lost and takes it out of the pool, so that no guard
// joins it again. It reports false if l was already lost. Called with
// wd.mu held.
func (wd *watchdog) dropLocked(l *lease) bool {
	if l.lost {
		return false
	}
	l.lost = true
	if wd.mu.pool[l.key] == l {
		delete(wd.mu.pool, l.key)
	}
	return true
}

// close stops the scheduler and returns every granted lease it held, with
// the guards still registered on each (a grant in flight revokes its lease
// itself on seeing closed). Later joins fail with ErrClosed, and releases
// still to retry are dropped: revoking their leases removes them.
func (wd *watchdog) close() map[*lease][]*guardState {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.mu.closed {
		return nil
	}
	wd.mu.closed = true
	out := make(map[*lease][]*guardState, len(wd.mu.pool))
	for _, l := range wd.mu.pool {
		l.lost = true
		if c := l.cancelRenew; c != nil {
			c()
		}
		if l.granted {
			out[l] = l.guards.drain()
		}
	}
	clear(wd.mu.pool)
	wd.mu.releases = nil
	close(wd.stop)
	return out
}

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
	// ready is closed once the grant has finished; id, granted, ttl and
	// grantErr are read-only after that.
	ready    chan struct{}
	grantErr error
	id       backend.LeaseID
	ttl      time.Duration // as granted by the backend

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

// guardList is the set of guards registered with one lease, threaded
// through the guards themselves (guardState.inLease) so that joining and
// leaving a lease costs a few pointer writes and no allocation or hashing:
// this sits on every Acquire and Unlock. The zero value is empty. It is
// guarded by watchdog.mu, like the rest of the lease's mutable state.
type guardList struct {
	head *guardState
	n    int
}

// guardLinks are a guard's pointers in its lease's guardList. Whether the
// guard is in a list at all is guardState.listed, so that a second remove
// is a no-op.
type guardLinks struct {
	prev, next *guardState
}

// push adds g, which is on no list: a guard joins one lease once.
func (l *guardList) push(g *guardState) {
	g.inLease, g.listed = guardLinks{next: l.head}, true
	if l.head != nil {
		l.head.inLease.prev = g
	}
	l.head = g
	l.n++
}

func (l *guardList) remove(g *guardState) {
	if !g.listed {
		return
	}
	ln := &g.inLease
	if ln.prev != nil {
		ln.prev.inLease.next = ln.next
	} else {
		l.head = ln.next
	}
	if ln.next != nil {
		ln.next.inLease.prev = ln.prev
	}
	*ln, g.listed = guardLinks{}, false
	l.n--
}

// drain empties the list and returns its guards.
func (l *guardList) drain() []*guardState {
	out := make([]*guardState, 0, l.n)
	for g := l.head; g != nil; {
		next := g.inLease.next
		g.inLease, g.listed = guardLinks{}, false
		out = append(out, g)
		g = next
	}
	*l = guardList{}
	return out
}
