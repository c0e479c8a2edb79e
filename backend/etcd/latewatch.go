package etcd

import "time"

// Watches that start late.
//
// A claim's own watch exists for one rare event, its loss (guarantee 4),
// yet it costs something on every acquisition: a watch started for the
// claim is either cancelled at the release (a cancel and its answer) or
// parked with the claim's name (see names.go), and then etcd sends it the
// delete of every later release under that name, which the client
// receives, decodes and drops. Measured on the uncontended cycle, that one
// event was about 5 % of the cycle's time (BENCHMARKS.md). Most locks are
// held for far less than the loss-detection target of 100 ms, and a claim
// released early never needed its watch.
//
// So, with a delay d (WithClaimWatchDelay, default DefaultClaimWatchDelay),
// a claim that has no watch - its name came without a parked one - gets
// its watch only once it has existed for between d and 2d. The watch is
// then created like a TryAcquire's was: at etcd's current revision, with a
// read of the claim's key settling the deletes since the claim's creation
// (watchcheck.go). A claim lost in its first moments is therefore reported
// when its watch starts, at most 2d and a round trip after it was created,
// instead of at once; a claim released or abandoned before then costs no
// watch traffic at all. A claim whose name came with a parked watch adopts
// it as before (it is already paid for), and a waiter's claim, which waits
// longer than d whenever the key is busy, gets its watch like any other:
// after d, not before its Txn.
//
// One timer per Backend serves every claim, in two generations: claims
// deferred while the timer is not running go in next and start the timer;
// claims deferred while it runs go in later. When it fires, next's claims
// get their watches and later becomes next. A claim therefore waits at
// least d and less than 2d, and the cost per claim is an append, with no
// clock read and no timer of its own.

// DefaultClaimWatchDelay is how long a claim goes without a watch of its own
// unless WithClaimWatchDelay says otherwise: a claim is watched once it has
// existed for between this delay and twice it.
const DefaultClaimWatchDelay = 5 * time.Millisecond

// maxClaimWatchDelay bounds WithClaimWatchDelay so that a loss is always
// reported well within guarantee 4's target of 100 ms.
const maxClaimWatchDelay = 40 * time.Millisecond

// lateWatches is the registry's queue of claims waiting for their watch.
// Guarded by registry.mu.
type lateWatches struct {
	delay       time.Duration // 0: claims are watched from before they exist
	timer       *time.Timer   // nil until first needed
	running     bool          // timer is set to fire
	closed      bool
	next, later []*entry
}

// deferWatchLocked queues e, whose create revision is known and which has
// no watch, to get one after the delay. Called with r.mu held.
func (r *registry) deferWatchLocked(e *entry) {
	l := &r.late
	switch {
	case l.closed:
		// The Backend is closing: the watch could not be served anyway.
	case l.running:
		l.later = append(l.later, e)
	default:
		l.next = append(l.next, e)
		l.running = true
		if l.timer == nil {
			// The timer's goroutine only spawns the work, so that Close
			// waits for it (see Backend.spawn).
			l.timer = time.AfterFunc(l.delay, func() { r.mux.spawn(r.startLate) })
		} else {
			l.timer.Reset(l.delay)
		}
	}
}

// startLate gives the claims of the oldest generation their watches,
// skipping those released, lost or watched meanwhile, and sets the timer
// again if the younger generation has claims.
//
// The watches are made live and queued under r.mu (mux.begin takes m.mu
// inside it; the mux never calls into the registry with m.mu held): a
// Release that removes the claim at the same moment then either comes
// first, and no watch is started, or finds the watch live and parks or
// stops it as it would any other. Only the sends wait for r.mu's release.
func (r *registry) startLate() {
	r.mu.Lock()
	l := &r.late
	due := l.next
	var flush *wstream
	for i, e := range due {
		due[i] = nil // the array is reused for the next generation
		if e.ended || e.isLost || e.watch != nil {
			continue
		}
		w := &keyWatch{key: e.key, from: e.token + 1, now: true, target: e}
		s, err := r.mux.begin(w)
		if err != nil {
			continue // the mux stopped for good: as if etcd refused the watch
		}
		e.watch = w
		if s != nil {
			flush = s
		}
	}
	l.next, l.later = l.later, due[:0]
	l.running = len(l.next) > 0 // never after closeLate, which empties both
	if l.running {
		l.timer.Reset(l.delay)
	}
	r.mu.Unlock()
	if flush != nil {
		r.mux.flush(flush)
	}
}

// closeLate stops the timer and forgets the queued claims; no watch is
// started late once it has returned (a startLate that runs after it finds
// nothing queued, and nothing is queued after it).
func (r *registry) closeLate() {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := &r.late
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	l.next, l.later, l.running = nil, nil, false
}
