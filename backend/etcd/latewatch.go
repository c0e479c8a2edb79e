package etcd

import "time"

// Watches that start late.
//
// A claim's own watch exists for one rare event, its loss (guarantee 4),
// yet it costs something on every acquisition: a watch started for the
// claim is either cancelled at the release (a cancel and its answer) or
// parked with the claim's name (see names.go), and then etcd sends it the
// delete of every later release under that name, which the client
// receives, decodes and drops. On the uncontended cycle that one event was
// about 5 % of the cycle's time (BENCHMARKS.md). Most locks are held for
// far less than the loss-detection target of 100 ms, and a claim released
// early never needed its watch.
//
// So, with a delay d (WithClaimWatchDelay, default DefaultClaimWatchDelay),
// a claim is mature once it has existed for between d and 2d, and:
//
//   - A mature claim's release parks its watch with its name, as without a
//     delay. A young claim's release stops its watch (one cancel), if it
//     has one, and gives the name back marked short (giveBackShort).
//   - A claim whose name came with a parked watch adopts it, as without a
//     delay. A waiting claim under any other name not marked short - a new
//     one, or one given back by a failed Acquire - starts its watch before
//     its Txn, as without a delay: nothing says yet that the key is held
//     briefly, and a watch started early costs a create alone. The rest - a
//     claim under a name marked short, or a TryAcquire's - gets its watch
//     only when it matures, if it still exists. That watch is created like
//     any late one, at etcd's current revision, with a read of the claim's
//     key settling the deletes since the claim's creation (watchcheck.go):
//     a loss before then is reported when the watch starts, at most 2d and
//     a round trip after the claim was made, instead of at once.
//
// A key taken over and over for short holds thus settles, after its first
// release, on no watch traffic at all; a key held long keeps one parked
// watch, as before; a key taken once and kept (many locks held) pays one
// create per claim, as before, and no read.
//
// One timer per Backend serves every claim, in two generations: claims
// queued while the timer is not running go in next and start the timer;
// claims queued while it runs go in later. When it fires, next's claims
// mature (and get their watches if they have none) and later becomes next.
// A claim therefore matures after at least d and less than 2d, and the
// cost per claim is an append, with no clock read and no timer of its own.

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
	delay  time.Duration // 0: claims are watched from before they exist
	timer  *time.Timer   // nil until first needed; set to fire exactly while next has claims
	closed bool
	next   []*entry
	later  []*entry
}

// deferWatchLocked queues e, whose create revision is known, to mature
// after the delay (and get a watch then, if it has none). Called with r.mu
// held.
func (r *registry) deferWatchLocked(e *entry) {
	l := &r.late
	switch {
	case l.closed:
		// The Backend is closing: the watch could not be served anyway.
	case len(l.next) > 0: // the timer runs
		l.later = append(l.later, e)
	default:
		l.next = append(l.next, e)
		if l.timer == nil {
			// The timer's goroutine only spawns the work, so that Close
			// waits for it (see Backend.spawn).
			l.timer = time.AfterFunc(l.delay, func() { r.mux.spawn(r.startLate) })
		} else {
			l.timer.Reset(l.delay)
		}
	}
}

// startLate matures the claims of the oldest generation and gives those
// without a watch theirs, skipping claims released or lost meanwhile, and
// sets the timer again if the younger generation has claims.
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
		if e.ended || e.isLost {
			continue
		}
		e.mature = true
		if e.watch != nil {
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
	if len(l.next) > 0 { // never after closeLate, which empties both
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
	l.next, l.later = nil, nil
}
