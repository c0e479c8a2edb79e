package redis

import (
	"sync"

	"github.com/ash-lock/ashlock/backend"
)

// tracked is a claim this Backend made, from the start of its Acquire until
// it is released or lost, so that the end of its lease reaches OnLost.
type tracked struct {
	lease  backend.LeaseID
	id     string // the claim's name
	onLost backend.LossListener
	ref    claimRef
	nkeys  int // entries in its lease's index: one per key
	// outside: an acquisition that adds its claim only once its keys are
	// free, asleep until then, has no claim in the store (under
	// registry.mu).
	outside bool

	mu    sync.Mutex
	state trackState
}

type trackState int

const (
	pending   trackState = iota // Acquire has not returned it yet
	holding                     // returned; a loss calls OnLost
	releasing                   // a Release has been sent
	lost                        // its lease ended
	done                        // released, or its Acquire failed
)

// heldOn counts what this Backend holds on one lease, for KeepAlive's
// check that the store still has it all.
type heldOn struct {
	keys     int    // index entries of the holding claims
	releases uint64 // Releases begun so far
}

// claimRef names a returned claim: its first key and token.
type claimRef struct {
	key   string
	token uint64
}

// track registers a claim named id being acquired on lease, before
// anything of it is sent to the store.
func (r *registry) track(lease backend.LeaseID, id string, onLost backend.LossListener, nkeys int) *tracked {
	t := &tracked{lease: lease, id: id, onLost: onLost, nkeys: nkeys}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.claims[lease]
	if m == nil {
		m = map[*tracked]struct{}{}
		r.claims[lease] = m
	}
	m[t] = struct{}{}
	return t
}

// promote makes t a holder named ref, unless its lease has ended meanwhile.
func (r *registry) promote(t *tracked, ref claimRef) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != pending {
		return false
	}
	t.state, t.ref = holding, ref
	r.mu.Lock()
	r.byRef[ref] = t
	r.heldOnLocked(t.lease).keys += t.nkeys
	r.mu.Unlock()
	return true
}

// isLost reports whether t's lease is known to have ended.
func (t *tracked) isLost() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state == lost
}

// heldOnLocked returns the count of lease, created if need be.
func (r *registry) heldOnLocked(lease backend.LeaseID) *heldOn {
	h := r.held[lease]
	if h == nil {
		h = &heldOn{}
		r.held[lease] = h
	}
	return h
}

// unholdLocked takes t, a holder until now, out of its lease's count.
func (r *registry) unholdLocked(t *tracked, release bool) {
	h := r.heldOnLocked(t.lease)
	h.keys -= t.nkeys
	if release {
		h.releases++
	}
	if h.keys == 0 && !release {
		delete(r.held, t.lease)
	}
}

// held reports how many index entries of lease this Backend's holders
// have, and how many Releases have begun on it.
func (r *registry) heldOn(lease backend.LeaseID) (keys int, releases uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.held[lease]; h != nil {
		return h.keys, h.releases
	}
	return 0, 0
}

// trackedEntries returns how many index entries the claims tracked on
// lease (being acquired, held or being released) may have in the store:
// one per key each, none for an acquisition waiting outside the queues.
// Counted anyway, such a waiter would hide from KeepAlive a claim left
// behind on the same lease, perhaps the very one it waits for.
func (r *registry) trackedEntries(lease backend.LeaseID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for t := range r.claims[lease] {
		if !t.outside {
			n += t.nkeys
		}
	}
	return n
}

// waitOutside records whether t waits for its keys to be free with no
// claim in the store (see whenFree).
func (r *registry) waitOutside(t *tracked, yes bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.outside = yes
}

// trackedIDs returns the names of the claims tracked on lease.
func (r *registry) trackedIDs(lease backend.LeaseID) map[string]struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make(map[string]struct{}, len(r.claims[lease]))
	for t := range r.claims[lease] {
		ids[t.id] = struct{}{}
	}
	return ids
}

// releasing records that a Release of the holder named ref has been sent:
// from now on the store may no longer have it.
func (r *registry) releasing(ref claimRef) {
	r.mu.Lock()
	t := r.byRef[ref]
	r.mu.Unlock()
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state == holding {
		t.state = releasing
		r.mu.Lock()
		r.unholdLocked(t, true)
		r.mu.Unlock()
	}
}

// untrack forgets t. Once it returns, OnLost is not called for t; a call
// already under way has returned.
func (r *registry) untrack(t *tracked) {
	t.mu.Lock()
	was := t.state
	t.state = done
	t.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if was == holding {
		r.unholdLocked(t, false)
	}
	if m := r.claims[t.lease]; m != nil {
		delete(m, t)
		if len(m) == 0 {
			delete(r.claims, t.lease)
		}
	}
	if r.byRef[t.ref] == t {
		delete(r.byRef, t.ref)
	}
}

// untrackRef forgets the holder named ref, if this Backend has it.
func (r *registry) untrackRef(ref claimRef) {
	r.mu.Lock()
	t := r.byRef[ref]
	r.mu.Unlock()
	if t != nil {
		r.untrack(t)
	}
}

// lose marks every claim on lease id lost and tells the holders' OnLost,
// once each. OnLost is called on the caller's goroutine and must not block.
func (r *registry) lose(id backend.LeaseID, cause error) {
	r.mu.Lock()
	ts := make([]*tracked, 0, len(r.claims[id]))
	for t := range r.claims[id] {
		ts = append(ts, t)
		if r.byRef[t.ref] == t {
			delete(r.byRef, t.ref)
		}
	}
	// A pending claim's Acquire sees the loss in its state and untracks
	// it; a holder is forgotten here, whether or not it is released later.
	delete(r.claims, id)
	delete(r.held, id)
	delete(r.indexChecked, id)
	r.mu.Unlock()
	for _, t := range ts {
		t.mu.Lock()
		switch t.state {
		case pending:
			t.state = lost
		case holding:
			t.state = lost
			if t.onLost != nil {
				t.onLost.ClaimLost(cause)
			}
		case releasing:
			t.state = lost
		}
		t.mu.Unlock()
	}
	// A claim promoted while the loop ran counted itself anew.
	r.mu.Lock()
	delete(r.held, id)
	r.mu.Unlock()
}

// heldIDs returns the names of the claims holding on lease, each with its
// number of index entries, and how many Releases have begun on it.
func (r *registry) heldIDs(lease backend.LeaseID) (map[string]int, uint64) {
	r.mu.Lock()
	ts := make([]*tracked, 0, len(r.claims[lease]))
	for t := range r.claims[lease] {
		ts = append(ts, t)
	}
	var releases uint64
	if h := r.held[lease]; h != nil {
		releases = h.releases
	}
	r.mu.Unlock()
	ids := map[string]int{}
	for _, t := range ts {
		t.mu.Lock()
		if t.state == holding {
			ids[t.id] += t.nkeys
		}
		t.mu.Unlock()
	}
	return ids, releases
}

// indexCheckDue reports whether the subscriber's stream has broken since
// lease's index was last read whole (see Backend.checkIndex), and the
// gap count to record once it has been.
func (r *registry) indexCheckDue(lease backend.LeaseID) (bool, uint64) {
	g := r.gaps.Load()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.indexChecked[lease] != g, g
}

// indexCheckedAt records that lease's index was read whole after gap
// count g.
func (r *registry) indexCheckedAt(lease backend.LeaseID, g uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.indexChecked[lease] = g
}
