package etcd

import (
	"fmt"
	"sync"

	"github.com/ash-lock/ashlock/backend"
)

// registry maps the etcd key of every claim this Backend is acquiring or
// holding to its entry, so that the one loss watch (see watch.go) can tell
// the right waiter or holder that its claim is gone.
//
// An entry is registered before the claim is created and its token (create
// revision) is filled in once etcd has answered. The watch only reports
// "key absent at revision r"; whether that concerns the entry's claim is
// decided by comparing with the token: the claim created at revision T is
// gone if and only if the key was absent at some revision r >= T. Claim
// names are reused (see names.go), but a name is lent to one acquisition at
// a time and only once its previous claim is known gone, so while an entry
// is registered no other incarnation of its key exists after T; deletes of
// earlier incarnations, however late they arrive, are below T.
// Keeping the highest absent revision seen makes the order in which the
// watch event and the Acquire reply arrive irrelevant.
//
// It also serves predecessor waits from the same watch (see predwait.go).
type registry struct {
	mu      sync.Mutex
	entries map[string]*entry

	// Predecessor waits; see predwait.go.
	preds   map[string][]*predWait // by the etcd key waited for
	healthy bool                   // the loss watch delivers every delete after last
	last    int64                  // no dispatched delete is above this revision

	// recent remembers the latest dispatched deletes (see predwait.go):
	// every dispatched delete above recentFloor is in it.
	recent      []deleted
	recentNext  int // once full, the slot to overwrite next (the oldest)
	recentFloor int64
}

type entry struct {
	key    string // etcd key of the claim
	onLost backend.LossListener

	// Guarded by registry.mu.
	token    int64 // create revision; 0 until known
	absentAt int64 // highest revision at which the key was seen absent
	holding  bool  // Acquire has handed the claim out
	isLost   bool
	lost     chan struct{} // closed when isLost becomes true
}

func newRegistry() *registry {
	return &registry{entries: make(map[string]*entry), preds: make(map[string][]*predWait)}
}

// add registers the claim key for one Acquire. A key already registered
// would mean two concurrent Acquires were lent the same name, which the
// name pool rules out; it is reported rather than silently shared.
func (r *registry) add(key string, onLost backend.LossListener) (*entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.entries[key]; dup {
		return nil, fmt.Errorf("etcd: claim %q is already being acquired or held by this Backend", key)
	}
	e := &entry{key: key, onLost: onLost, lost: make(chan struct{})}
	r.entries[key] = e
	return e, nil
}

// remove forgets e. Nothing is reported for it afterwards.
func (r *registry) remove(e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.entries[e.key] == e {
		delete(r.entries, e.key)
	}
}

// removeClaim forgets the entry of key if it is the claim with token that
// Acquire handed out, so a Release stops OnLost for exactly that claim. It
// reports whether it did: at most one call does per claim, and none once
// the claim's loss was seen.
func (r *registry) removeClaim(key string, token int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[key]; e != nil && e.holding && e.token == token {
		delete(r.entries, key)
		return true
	}
	return false
}

// setToken records the claim's create revision. It reports false if the
// claim is already known to be gone.
func (r *registry) setToken(e *entry, token int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.token = token
	r.evaluate(e)
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

// observeAbsent records that key did not exist at revision rev and returns
// the OnLost callbacks that became due. The caller runs them without
// holding any lock: a callback may call back into the Backend.
func (r *registry) observeAbsent(key string, rev int64) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.observeAbsentLocked(key, rev)
}

// deleted is one delete delivered by the loss watch.
type deleted struct {
	key string
	rev int64 // the revision of the delete
}

// observeDeletes dispatches the deletes of one loss-watch response, in
// revision order, to the claims and the predecessor waits they concern,
// then raises last to the highest of their revisions and progress (the
// revision up to which a progress notification says every delete was
// delivered; 0 if none). It returns the OnLost callbacks that became due,
// for the caller to run without holding any lock.
//
// All of it happens under one hold of r.mu: a waitPred that ran between the
// dispatch of a delete and the raise of last would see last below that
// delete's revision and register a wait for a delete already gone by.
func (r *registry) observeDeletes(dels []deleted, progress int64) []func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	var due []func()
	last := progress
	for _, d := range dels {
		r.rememberLocked(d)
		r.wakePredsLocked(d.key, d.rev)
		if fn := r.observeAbsentLocked(d.key, d.rev); fn != nil {
			due = append(due, fn)
		}
		last = max(last, d.rev)
	}
	r.last = max(r.last, last)
	return due
}

// observeAbsentLocked is observeAbsent with r.mu held.
func (r *registry) observeAbsentLocked(key string, rev int64) func() {
	e := r.entries[key]
	if e == nil || rev <= e.absentAt {
		return nil
	}
	e.absentAt = rev
	return r.evaluate(e)
}

// evaluate decides whether e's claim is gone and, the first time it is,
// wakes its waiter and returns the OnLost call for a holder.
// Called with r.mu held.
func (r *registry) evaluate(e *entry) func() {
	if e.isLost || e.token == 0 || e.absentAt < e.token {
		return nil
	}
	e.isLost = true
	close(e.lost)
	delete(r.entries, e.key)
	if !e.holding || e.onLost == nil {
		return nil
	}
	cause := fmt.Errorf("%w: claim %s no longer exists in etcd (seen at revision %d)",
		backend.ErrLeaseExpired, e.key, e.absentAt)
	onLost := e.onLost
	return func() { onLost.ClaimLost(cause) }
}

// snapshot lists the registered keys and their tokens (0 if not known yet).
func (r *registry) snapshot() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.entries))
	for k, e := range r.entries {
		out[k] = e.token
	}
	return out
}
