package etcd

import (
	"fmt"
	"sync"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// registry knows the claims this Backend is acquiring or holding, by etcd
// key, and watches each one for its loss (see watch.go).
//
// An entry is registered before its claim is created. A watch on the
// claim's key waits for its first delete at or after T+1, where T is the
// claim's create revision (the claim cannot be deleted at the revision
// that created it). Acquire does not wait for etcd to confirm the watch.
// Like every watch of the mux it is created at etcd's current revision h;
// for a request that waits it is started before the claim is created
// (watchEarly) and normally reaches etcd first (h < T), so it covers the
// claim's whole life. Otherwise (h >= T: a TryAcquire, whose watch starts
// once T is known, or an early watch that lost the race) a read of the
// key at h tells whether the claim was deleted in between (see
// watchcheck.go). Either way a delete that happened before the watch
// reached etcd is reported as promptly as one after.
//
// The first delete of the key at or after T+1 is this claim's: a later
// claim under the same name can only be created once this one is gone. So
// that delete, or a check finding the key absent or re-created (see
// watchcheck.go), means the claim is lost: a waiting Acquire stops waiting
// (lost is closed) and a holder's OnLost is called. Release and a failed
// Acquire remove the entry first and park or cancel the watch (see
// removeClaim and detach), so the delete they make is not reported.
//
// With a claim watch delay (latewatch.go), a claim released before it has
// existed for the delay stops its watch instead of parking it, and the
// next claim under its name is not watched early: its watch starts once it
// has existed for the delay, and the read settles the deletes before it.
//
// Lock order: registry.mu, then mux.mu (startLate); never the reverse.
type registry struct {
	mux *mux

	mu      sync.Mutex
	entries map[string]*entry
	late    lateWatches
}

// entry is one claim being acquired or held. It is the target of the
// watch on its own key.
type entry struct {
	reg    *registry
	key    string // etcd key of the claim
	onLost backend.LossListener
	lost   chan struct{} // closed when the claim is known to be gone

	// Guarded by registry.mu.
	token   int64 // create revision; 0 until known
	watch   *keyWatch
	holding bool // Acquire has handed the claim out
	ended   bool // removed: nothing more is reported
	isLost  bool
	mature  bool // has existed past the claim watch delay (latewatch.go)
}

// newRegistry returns a registry with a claim watch delay of lateBy (see
// latewatch.go); with lateBy 0, claims without a parked watch are watched
// from before they exist (watchEarly) or from the moment their create
// revision is known.
func newRegistry(m *mux, lateBy time.Duration) *registry {
	return &registry{mux: m, entries: make(map[string]*entry), late: lateWatches{delay: lateBy}}
}

// watchesEarly reports whether a waiting Acquire whose claim name came
// without a parked watch should call watchEarly: always without a claim
// watch delay, and with one unless the name's last claim was a short hold
// (short, see latewatch.go).
func (r *registry) watchesEarly(short bool) bool { return r.late.delay == 0 || !short }

// add registers the claim key for one Acquire, with w, the parked watch
// that came with the claim's name (nil if none), as its watch. A key
// already registered would mean two concurrent Acquires share a claim
// name, which the caller must rule out; it is reported rather than
// silently shared, and w is stopped.
func (r *registry) add(key string, onLost backend.LossListener, w *keyWatch) (*entry, error) {
	e := &entry{reg: r, key: key, onLost: onLost, lost: make(chan struct{})}
	if w != nil && !r.mux.adopt(w, e) {
		w = nil // it failed while parked; a new one is started as usual
	}
	r.mu.Lock()
	if _, dup := r.entries[key]; dup {
		r.mu.Unlock()
		if w != nil {
			r.mux.stop(w)
		}
		return nil, fmt.Errorf("etcd: claim %q is already being acquired or held by this Backend", key)
	}
	// An adopted watch's resume revision is unknown until setToken, like
	// that of a watch started by watchEarly, so it reports no delete
	// before then: e needs no guard against an early notice.
	e.watch = w
	r.entries[key] = e
	r.mu.Unlock()
	return e, nil
}

// watchEarly starts the watch on e's claim before the claim is created
// (see mux.setFrom): sent ahead of the Txn that creates the claim, it
// normally reaches etcd first, so that it covers the claim's whole life
// without a read. Acquire calls it for requests that wait, whose claim is
// nearly always created; a TryAcquire on a held key would only pay a
// create and a cancel for nothing.
func (r *registry) watchEarly(e *entry) {
	r.mu.Lock()
	if e.watch != nil || e.ended {
		r.mu.Unlock()
		return
	}
	w := &keyWatch{key: e.key, now: true, target: e}
	e.watch = w
	r.mu.Unlock()
	r.mux.start(w)
}

// setToken records the claim's create revision and has its watch look
// for the claim's delete from the next revision on. A claim without a
// watch (no parked one, no watchEarly) gets one now, or, with a claim watch
// delay, later (latewatch.go). It reports false if the claim is already
// known to be gone. Called at most once per entry.
func (r *registry) setToken(e *entry, token int64) bool {
	r.mu.Lock()
	if e.isLost {
		r.mu.Unlock()
		return false
	}
	e.token = token
	w, early := e.watch, e.watch != nil
	if !e.ended && r.late.delay > 0 {
		// Every claim is queued, to learn when it is mature; one
		// without a watch gets it then.
		r.deferWatchLocked(e)
		if !early {
			r.mu.Unlock()
			return true
		}
	}
	if !early && !e.ended {
		w = &keyWatch{key: e.key, from: token + 1, now: true, target: e}
		e.watch = w
	}
	r.mu.Unlock()
	switch {
	case early:
		r.mux.setFrom(w, token+1)
	case w != nil:
		r.mux.start(w)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return !e.isLost
}

// promote marks e as handed out to the caller, so that a later loss calls
// OnLost. It reports false, and promotes nothing, if the claim is already
// known to be gone: Acquire then fails instead of returning a dead claim.
func (r *registry) promote(e *entry) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.isLost {
		return false
	}
	e.holding = true
	return true
}

// remove forgets e and cancels its watch. Nothing is reported for it
// afterwards.
func (r *registry) remove(e *entry) {
	r.mu.Lock()
	w := r.removeLocked(e)
	r.mu.Unlock()
	if w != nil {
		r.mux.stop(w)
	}
}

// detach forgets e like remove, but parks its watch (see mux.park) and
// returns it, to go back to the name pool with e's name; nil if e had no
// watch or it could not be parked (it is stopped then). The caller must be
// giving the name back now: a parked watch is only for a free name.
func (r *registry) detach(e *entry) *keyWatch {
	r.mu.Lock()
	w := r.removeLocked(e)
	r.mu.Unlock()
	return r.park(w)
}

// removeClaim forgets the entry of key if it is the claim with token that
// Acquire handed out, so a Release stops OnLost for exactly that claim. It
// reports whether it did: at most one call does per claim, and none once
// the claim's loss was seen. The claim's watch is parked, not stopped, and
// returned (nil if none or it could not be parked): the caller stops it,
// or gives it back to the name pool once the claim is known to be gone.
// Parking before the release's delete is sent makes that delete one the
// watch merely remembers, not a loss. With a claim watch delay, the watch
// of a claim released before it was mature is stopped instead, and nil
// returned: the key is being taken for short holds, which need no watch
// (latewatch.go).
func (r *registry) removeClaim(key string, token int64) (bool, *keyWatch) {
	r.mu.Lock()
	e := r.entries[key]
	if e == nil || !e.holding || e.token != token {
		r.mu.Unlock()
		return false, nil
	}
	w := r.removeLocked(e)
	young := r.late.delay > 0 && !e.mature
	r.mu.Unlock()
	if young && w != nil {
		r.mux.stop(w)
		return true, nil
	}
	return true, r.park(w)
}

// park parks w, or stops it if it cannot be parked; nil in, nil out.
func (r *registry) park(w *keyWatch) *keyWatch {
	if w == nil {
		return nil
	}
	if !r.mux.park(w) {
		r.mux.stop(w)
		return nil
	}
	return w
}

// removeLocked ends e and returns its watch, for the caller to stop once
// r.mu is released (stop may send). Called with r.mu held.
func (r *registry) removeLocked(e *entry) *keyWatch {
	if r.entries[e.key] == e {
		delete(r.entries, e.key)
	}
	e.ended = true
	return e.watch
}

// keyDeleted implements watchTarget: the claim is gone.
func (e *entry) keyDeleted(rev int64) {
	r := e.reg
	r.mu.Lock()
	if e.ended || e.isLost {
		r.mu.Unlock()
		return
	}
	e.isLost = true
	close(e.lost)
	if r.entries[e.key] == e {
		delete(r.entries, e.key)
	}
	onLost := e.onLost
	if !e.holding {
		onLost = nil
	}
	r.mu.Unlock()
	if onLost != nil {
		onLost.ClaimLost(fmt.Errorf("%w: claim %s no longer exists in etcd (gone at revision %d)",
			backend.ErrLeaseExpired, e.key, rev))
	}
}

// watchCreated implements watchTarget; the entry has nothing to do.
func (e *entry) watchCreated(int64) {}

// watchFailed implements watchTarget. A claim whose watch etcd refuses is
// left unwatched: its loss is then seen by the lease's renewals (a lost
// lease) or, for a waiter, by the Txn that checks its claim after each
// wake; an operator's delete of a held claim goes unseen.
func (e *entry) watchFailed(error) {}
