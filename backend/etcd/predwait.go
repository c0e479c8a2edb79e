package etcd

// Predecessor waits served by the loss watch.
//
// A fair waiter blocks until the claim just ahead of it is deleted at a
// revision >= from, where from is one past the revision at which it read
// that claim. A watch of its own started at from is a watch on the past:
// etcd puts it among its "unsynced" watchers and catches those up on a
// 100ms timer, so a handoff could stall for up to that long. The loss watch
// (watch.go) is already synced and already carries every delete under the
// claims prefix, so the registry hands those deletes to the waiters too.
//
// The rule that makes this safe: a wait may rely on the loss watch only if
// every delete at a revision >= from is still to be dispatched when the
// wait is registered. The registry keeps last, a revision such that every
// delete the loss watch has dispatched is at or below it (it is raised in
// the same critical section that dispatches, see observeDeletes), and
// registers a wait only while the watch is established and last < from.
// Registration and dispatch share r.mu, so a delete at rev >= from is
// dispatched either before registration (then last >= rev >= from and the
// wait is refused) or after it (then it wakes the wait). A wait that is
// refused falls back to a watch of its own.
//
// Under load the loss watch often dispatches some other delete between the
// waiter's read and its registration, so last >= from is common. To keep
// those waits off the slow path too, the registry remembers the most recent
// deletes it dispatched (recent, a ring of recentDeletes entries, which
// holds every dispatched delete above recentFloor). If from > recentFloor,
// every delete in [from, last] is in the ring: if one of them is of key,
// the wait is already satisfied; if none is, registering is as safe as when
// last < from.
//
// Claim names are reused (see names.go), so the ring, and the watch, also
// carry deletes of earlier claims under the predecessor's name. None of
// them can satisfy the wait: from is one past a revision at which the
// waiter read the predecessor, so it is above the predecessor's create
// revision, and an earlier claim under the same name was deleted before the
// name was lent again, hence before that create revision. Only a delete of
// the predecessor itself (or of a later claim under its name, which implies
// it) is at or above from.
//
// When the loss watch stops (error, compaction, leader loss, Close) it may
// miss deletes, so every registered wait is woken. A wake is only a hint:
// both callers of waitDeleted look at the queue again with a Txn after it
// returns and go back to waiting if the claim ahead is still there, so a
// spurious wake costs one round trip, never correctness. While the watch is
// down nothing registers; it is marked established again only once it
// delivers every delete after last.

// predWait is one registered wait: closed once key is deleted at a
// revision >= from, or when the loss watch stops.
type predWait struct {
	from int64
	ch   chan struct{}
}

// waitPred registers a wait for the delete of key at a revision >= from.
// It returns the channel closed on that delete (or on a stop of the loss
// watch) and the function that unregisters the wait, which the caller must
// call once it stops waiting, whatever the reason; calling it after the
// wake is harmless. ok is false, and nothing is registered, when the loss
// watch cannot promise to deliver that delete: the caller then watches by
// itself. Safe for concurrent use.
func (r *registry) waitPred(key string, from int64) (ch <-chan struct{}, cancel func(), ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.healthy {
		return nil, nil, false
	}
	if r.last >= from {
		if from <= r.recentFloor {
			// A delete of key in [from, last] may already have been
			// dispatched, and the ring no longer remembers it.
			return nil, nil, false
		}
		if r.deletedSinceLocked(key, from) {
			return closedChan, func() {}, true
		}
	}
	w := &predWait{from: from, ch: make(chan struct{})}
	r.preds[key] = append(r.preds[key], w)
	return w.ch, func() { r.dropPred(key, w) }, true
}

// dropPred unregisters w if it is still registered.
func (r *registry) dropPred(key string, w *predWait) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.preds[key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	r.setPredsLocked(key, ws)
}

// wakePredsLocked wakes and unregisters the waits on key that a delete at
// rev satisfies. Called with r.mu held.
func (r *registry) wakePredsLocked(key string, rev int64) {
	ws := r.preds[key]
	if len(ws) == 0 {
		return
	}
	kept := ws[:0]
	for _, w := range ws {
		if rev >= w.from {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	clear(ws[len(kept):]) // let the woken waits be collected
	r.setPredsLocked(key, kept)
}

// recentDeletes is how many dispatched deletes the registry remembers.
const recentDeletes = 1024

// closedChan is handed to a wait that a remembered delete already satisfies.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// rememberLocked records a dispatched delete in the ring, forgetting the
// oldest when it is full. Called with r.mu held, in dispatch order.
func (r *registry) rememberLocked(d deleted) {
	if len(r.recent) < recentDeletes {
		r.recent = append(r.recent, d)
		return
	}
	old := r.recent[r.recentNext]
	// Several deletes can share a revision (one Txn, one revoke): forgetting
	// one of them means no delete at that revision is vouched for any more.
	r.recentFloor = max(r.recentFloor, old.rev)
	r.recent[r.recentNext] = d
	r.recentNext = (r.recentNext + 1) % recentDeletes
}

// deletedSinceLocked reports whether the ring holds a delete of key at a
// revision >= from. Called with r.mu held.
func (r *registry) deletedSinceLocked(key string, from int64) bool {
	for _, d := range r.recent {
		if d.key == key && d.rev >= from {
			return true
		}
	}
	return false
}

// forgetRecentLocked empties the ring and vouches for nothing up to last:
// the loss watch is starting (again) and may have missed deletes before.
func (r *registry) forgetRecentLocked() {
	r.recent, r.recentNext = r.recent[:0], 0
	r.recentFloor = r.last
}

func (r *registry) setPredsLocked(key string, ws []*predWait) {
	if len(ws) == 0 {
		delete(r.preds, key)
	} else {
		r.preds[key] = ws
	}
}

// watchEstablished records that the loss watch now delivers every delete
// after revision from on, in order and without gaps, until watchStopped.
func (r *registry) watchEstablished(from int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.healthy = true
	// max: raising last only ever refuses more waits. A watch resumed
	// from below the registry's last changes nothing, since no wait was
	// registered while it was down.
	r.last = max(r.last, from)
	r.forgetRecentLocked()
}

// watchStopped records that the loss watch has stopped delivering deletes
// and wakes every registered wait: a delete it would have dispatched may
// now never come.
func (r *registry) watchStopped() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.healthy = false
	r.forgetRecentLocked()
	for key, ws := range r.preds {
		for _, w := range ws {
			close(w.ch)
		}
		delete(r.preds, key)
	}
}
