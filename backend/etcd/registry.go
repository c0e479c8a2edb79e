package etcd

import (
	"fmt"
	"sync"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// registry knows the claims this Backend is acquiring, holding or still
// removing, by etcd key: it names new claims, keeps each name taken for as
// long as the package documentation's "Claim names" says, and watches each
// claim for its loss as its "Watches" says. Each claim's entry moves
// through the states of claimState.
//
// Loss. A claim is watched for the first delete of its key at or after
// T+1, where T is its create revision; the first such delete is this
// claim's, since a later claim under the name needs this one gone first.
// The watch starts once the claim has been held for holdDelay, or has
// waited in the queue for waitDelay; a watch that starts late is created
// at etcd's current revision, and a read of the key settles the deletes
// since the claim's creation (watchcheck.go). That delete, or a read
// finding the claim gone, moves the entry to lost: a waiting Acquire
// stops, and a claim handed out has OnLost called. Release and a failed
// Acquire end the entry, stopping its timer and watch, before they delete
// the claim, so their own delete is never reported.
type registry struct {
	mux                  *mux
	holdDelay, waitDelay time.Duration // the constants, but in tests
	// abandon removes, in the background, the remains of a held
	// multi-key claim (created at revision token) lost at one of its
	// keys, then forgets its entry. It must not block: notify calls it.
	abandon func(e *entry, token int64)

	mu      sync.Mutex
	entries map[string]*entry
}

// How long a claim goes without a watch of its own: once handed out, and
// while it waits in the queue.
//
// holdDelay is short enough that a loss in a claim's first moments is
// still reported within a few milliseconds. It is not shorter because its timer is not
// free even when Release stops it in time: an idle Go runtime sleeps until
// the earliest timer deadline it has seen, stopped or not, so a client
// that takes and releases locks back to back is woken about once per
// holdDelay for nothing. The delay is long enough to make those wake-ups
// rare next to the lock cycle itself.
const (
	holdDelay = 5 * time.Millisecond
	waitDelay = time.Second
)

// entry is one claim being acquired, held or removed. It is the target of
// the watch on its own key.
type entry struct {
	reg    *registry
	key    string    // etcd key of the claim (of its first key, for a multi-key claim)
	keys   []string  // the claim's etcd keys, one per key it holds, key first
	one    [1]string // keys' array for a single-key claim
	lease  backend.LeaseID
	owner  string // the request's owner label, for SetValue's record
	onLost backend.LossListener
	lost   chan struct{} // closed on the move to state lost, for waiters to select on

	// Guarded by registry.mu.
	state   claimState
	token   int64       // create revision; 0 until known; written by its Acquire alone
	timer   *time.Timer // starts the watches; nil until the claim waits or is handed out
	watches []*keyWatch // one per key, once started
}

// claimState is where an entry is in its life. Each move is made under
// registry.mu, by the method named:
//
//	acquiring --promote--> held
//	acquiring, held --notify--> lost
//	acquiring, held, lost --end--> ended
//	ended --forget--> unregistered; or with its lease (forgetLease)
//
// A single-key claim's name is free again as soon as it is lost, since the
// claim is gone from etcd; every other name stays taken, so that no two
// acquisitions of this Backend ever share one, until forget.
type claimState uint8

const (
	acquiring claimState = iota // Acquire runs: a loss ends its wait
	held                        // handed out by Acquire: a loss calls OnLost
	lost                        // known gone from etcd (at one key at least)
	ended                       // released, or its Acquire failed: no loss is reported any more
)

func newRegistry(m *mux, abandon func(e *entry, token int64)) *registry {
	return &registry{mux: m, holdDelay: holdDelay, waitDelay: waitDelay, abandon: abandon, entries: make(map[string]*entry)}
}

// add registers a new claim of kind k under lease with one etcd key in
// each of the queue directories dirs, named alike in all of them: the
// lowest slot that no registered claim uses in any of them. One name for
// all gives the claim one identity (name plus the create revision its keys
// share) at every key.
func (r *registry) add(dirs []string, k backend.Kind, lease backend.LeaseID, onLost backend.LossListener) *entry {
	e := &entry{reg: r, lease: lease, onLost: onLost, lost: make(chan struct{})}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(dirs) > 1 {
		e.keys = make([]string, len(dirs))
	} else {
		e.keys = e.one[:]
	}
next:
	for slot := 0; ; slot++ {
		name := kindName(k, claimName(lease, slot))
		for i, dir := range dirs {
			e.keys[i] = dir + name
			if _, taken := r.entries[e.keys[i]]; taken {
				continue next
			}
		}
		for _, key := range e.keys {
			r.entries[key] = e
		}
		e.key = e.keys[0]
		return e
	}
}

// setToken records the claim's create revision, from which its watch
// looks for its delete. Called once per entry, by its Acquire, before
// waiting or promote; the Acquire reads e.token without the lock, since
// no one else writes it.
func (r *registry) setToken(e *entry, token int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.token = token
}

// waiting starts e's wait clock: its watch starts once it has waited for
// waitDelay, unless it is handed out or ended first.
func (r *registry) waiting(e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armLocked(e, r.waitDelay)
}

// promote marks e as handed out to the caller, so that a later loss calls
// OnLost, and has its watch start once it has been held for holdDelay. It
// reports false, and promotes nothing, if the claim is already known to be
// gone: Acquire then fails instead of returning a dead claim.
func (r *registry) promote(e *entry) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.state != acquiring {
		return false
	}
	e.state = held
	r.armLocked(e, r.holdDelay)
	return true
}

// armLocked has e's watch start in d, unless it has started. r.mu held.
func (r *registry) armLocked(e *entry, d time.Duration) {
	switch {
	case len(e.watches) > 0:
	case e.timer == nil:
		// The timer's goroutine only spawns the work, so that the
		// Backend's Close waits for it.
		e.timer = time.AfterFunc(d, func() { r.mux.spawn(func() { r.mature(e) }) })
	default:
		e.timer.Reset(d) // a mature that runs twice starts one watch
	}
}

// mature starts e's watch unless it has one or e has ended. The watch is
// made live under r.mu (mux.begin takes only mux.mu, and the mux never calls
// into the registry while holding it), so an end at the same moment either
// comes first, and no watch starts, or finds the watch and stops it.
func (r *registry) mature(e *entry) {
	r.mu.Lock()
	// A multi-key claim is lost when it is lost at any key: every key's
	// watch reports to the entry. A begin fails only once the mux has
	// stopped for good: as if etcd refused the watch.
	var s *wstream
	if e.state < lost && len(e.watches) == 0 { // not gone or ended, nor watched by an earlier mature
		for _, k := range e.keys {
			w := &keyWatch{key: k, from: e.token + 1, now: true, target: e}
			if ws, err := r.mux.begin(w); err == nil {
				e.watches, s = append(e.watches, w), ws
			}
		}
	}
	r.mu.Unlock()
	// The stream can be replaced between two begins, never by an earlier
	// one, so only the last begin's stream can still need a flush: a stream
	// that is no longer current has nothing to send (flush does nothing),
	// and its successor creates every live watch.
	r.mux.flush(s)
}

// end stops reporting e's loss and stops its timer and watch; the entry
// stays registered, its name taken, until forget. It reports false if the
// claim was already known to be gone (lost): a single-key claim's name may
// then belong to a newer claim already, and a multi-key claim's remains
// are being removed (abandon), so the caller must not delete by name.
// Once end has returned true, notify changes nothing, so the name
// stays the claim's until forget.
func (r *registry) end(e *entry) bool {
	r.mu.Lock()
	live := e.state != lost
	e.state = max(e.state, ended)
	e.onLost = nil // an entry can outlive its claim's guard (see Release)
	if e.timer != nil {
		e.timer.Stop()
	}
	ws := e.watches
	r.mu.Unlock()
	for _, w := range ws {
		r.mux.stop(w)
	}
	return live
}

// forget unregisters e: its claim is known to be gone, and its name free.
func (r *registry) forget(e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unregisterLocked(e)
}

// unregisterLocked removes e's keys from the registry. r.mu held.
func (r *registry) unregisterLocked(e *entry) {
	for _, k := range e.keys {
		if r.entries[k] == e {
			delete(r.entries, k)
		}
	}
}

// held returns the entry of the claim at key created at revision token that
// Acquire handed out, or nil if there is none.
func (r *registry) held(key string, token int64) *entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[key]; e != nil && e.state == held && e.token == token {
		return e
	}
	return nil
}

// forgetLease unregisters the ended entries of lease id, which has ended
// or is being revoked: their claims go with it, and no claim is made under
// it any more. (Live entries hear of it from their watches.)
func (r *registry) forgetLease(id backend.LeaseID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.entries {
		if e.lease == id && e.state == ended {
			r.unregisterLocked(e) // deleting during range is allowed
		}
	}
}

// notify implements watchTarget: the claim is gone, at one of its keys at
// least. A claim whose watch fails (etcd refuses it) is left unwatched: its
// loss is then seen by the lease's renewals (a lost lease) or, for a
// waiter, by the Txn that checks its claim after each wake; an operator's
// delete of a held claim goes unseen.
//
// A single-key claim is gone altogether, so its name is free again. A
// multi-key claim may still exist at its other keys, where it goes on
// blocking the queue, and its name there must stay taken: were it reused,
// a new claim of this Backend would find the remains under its name and
// take them, token and all, for its own. So a held multi-key claim is
// handed to abandon, which deletes what is left and then frees the name;
// a waiting one is removed by its failing Acquire.
func (e *entry) notify(n watchNews) {
	r := e.reg
	r.mu.Lock()
	was := e.state
	if n.err != nil || (was != acquiring && was != held) {
		r.mu.Unlock()
		return
	}
	e.state = lost
	close(e.lost)
	if len(e.keys) == 1 {
		r.unregisterLocked(e)
	}
	ws, onLost, token := e.watches, e.onLost, e.token
	r.mu.Unlock()
	if onLost != nil && was == held {
		onLost.ClaimLost(fmt.Errorf("%w: claim %s no longer exists in etcd (gone at revision %d)",
			backend.ErrLeaseExpired, e.key, n.rev))
	}
	for _, w := range ws {
		r.mux.stopLater(w) // the watches of its other keys (a no-op for the one that fired)
	}
	if len(e.keys) > 1 && was == held {
		r.abandon(e, token)
	}
}
