package redis

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// registry routes what the subscriber hears to the goroutines of this
// Backend that wait for it: Acquires waiting for claims ahead of theirs,
// Observes, and holders to tell of a loss. Safe for concurrent use.
type registry struct {
	lay layout
	sub subscriber // nil: no connection (the registry's own tests)
	// subMu orders changes of the subscriptions with the commands that
	// make them; taken before mu.
	subMu sync.Mutex

	mu          sync.Mutex
	chans       map[string]*chanSub
	pinged      uint64                // the last ping sent
	ponged      uint64                // the last ping answered
	sent        []sentPing            // the pings not answered yet, in order
	verified    time.Time             // when the last ping answered was sent
	unconfirmed map[*watcher]struct{} // armed watchers holding an unconfirmed channel
	byKey       map[string]map[*watcher]struct{}
	byLease     map[backend.LeaseID]map[*watcher]struct{} // armed watchers only
	disarmed    map[*watcher]struct{}
	claims      map[backend.LeaseID]map[*tracked]struct{}
	byRef       map[claimRef]*tracked // holders, for Release
	held        map[backend.LeaseID]*heldOn
	// indexChecked is, per lease, the gap count when its index was last
	// read whole (see Backend.checkIndex); absent means 0.
	indexChecked map[backend.LeaseID]uint64
	observers    map[string]map[*observer]struct{}
	byID         map[string]*watcher // watchers told on the Backend's own channel, by claim ID (see direct)
	inGap        bool                // the subscriber's stream broke and is not restored yet
	gapFrom      time.Time           // verified when it broke: what came after may be lost
	gaps         atomic.Uint64       // starts and ends of gaps so far, changed under mu (see lastHandoff)
}

func newRegistry(lay layout, sub subscriber) *registry {
	return &registry{
		lay:          lay,
		sub:          sub,
		chans:        map[string]*chanSub{},
		unconfirmed:  map[*watcher]struct{}{},
		byKey:        map[string]map[*watcher]struct{}{},
		byLease:      map[backend.LeaseID]map[*watcher]struct{}{},
		disarmed:     map[*watcher]struct{}{},
		claims:       map[backend.LeaseID]map[*tracked]struct{}{},
		byRef:        map[claimRef]*tracked{},
		held:         map[backend.LeaseID]*heldOn{},
		indexChecked: map[backend.LeaseID]uint64{},
		observers:    map[string]map[*observer]struct{}{},
		byID:         map[string]*watcher{},
		verified:     time.Now(), // nobody waits or observes before the first subscription
	}
}

// claimEvent names one claim at one key.
type claimEvent struct {
	key   string
	token uint64
}

// wanted is what a waiter waits for of one claim: its departure, and its
// admission too when admission is set. admitted is whether the claim was
// admitted when read.
type wanted struct {
	claimEvent
	admission bool
	admitted  bool
}

// watcher is one goroutine waiting for events. Between disarm and arm it
// reads the store; whatever it hears meanwhile is kept in seen, so that
// arm can tell whether the read may already be stale. That closes the gap
// between a read and the start of the wait without waking on every event.
type watcher struct {
	wake chan struct{} // capacity 1: a signal waiting to be taken
	keys []string
	any  bool   // every event of its keys wakes it (an Observe)
	id   string // the claim it waits for on the Backend's own channel, if any (see direct)

	// Guarded by registry.mu.
	chans      []string // the channels it holds, kept from one arm to the next
	armed      bool
	woke       byte                // why it was last signalled since armed: 0, wokeEvent or wokeConfirmed
	readFrom   uint64              // the last ping answered when its last read began
	want       map[claimEvent]bool // the claims waited for; true: their admission too
	leases     []backend.LeaseID
	seen       []heard
	seenLeases []backend.LeaseID
	stale      bool    // a resubscription happened while disarmed
	handoff    handoff // the last departure from the head of its queue heard, armed or not
}

// handoff is the departure of a claim from the head of its queue, and the
// server's clock then: from that moment the claim just behind it has no
// claim ahead (see wait.go's handedOff).
type handoff struct {
	claimEvent
	at       time.Time // zero: none heard
	recorded bool      // the run recorded at in the claim behind (see handed in scripts.go)
}

// heard is an event a disarmed watcher heard.
type heard struct {
	claimEvent
	what byte
}

// maxSeen bounds what a disarmed watcher keeps (an Observe's caller may
// take its time over a state); past it, the watcher just reads again.
const maxSeen = 64

// hear records e, heard while w is disarmed. Guarded by registry.mu.
func (w *watcher) hear(e claimEvent, what byte) {
	if len(w.seen) < maxSeen {
		w.seen = append(w.seen, heard{e, what})
	} else {
		w.stale = true
	}
}

// Why a watcher was signalled.
const (
	wokeEvent     = 'e' // an event, a lease's end or a resubscription
	wokeConfirmed = 'c' // only the confirmation of its subscriptions
)

// wake signals w for why. Guarded by registry.mu.
func (w *watcher) wakeFor(why byte) {
	if w.woke != wokeEvent {
		w.woke = why
	}
	w.signal()
}

func (w *watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// watch registers a watcher of keys, disarmed.
func (r *registry) watch(keys []string, any bool) *watcher {
	w := &watcher{wake: make(chan struct{}, 1), keys: keys, any: any}
	r.mu.Lock()
	defer r.mu.Unlock()
	w.readFrom = r.ponged
	for _, k := range keys {
		m := r.byKey[k]
		if m == nil {
			m = map[*watcher]struct{}{}
			r.byKey[k] = m
		}
		m[w] = struct{}{}
	}
	r.disarmed[w] = struct{}{}
	return w
}

// unwatch forgets w, and the channels only it held.
func (r *registry) unwatch(w *watcher) {
	r.subMu.Lock()
	defer r.subMu.Unlock()
	r.mu.Lock()
	_, drop, _ := r.retain(w, nil)
	r.unwatchLocked(w)
	r.mu.Unlock()
	r.send(nil, drop, 0)
}

func (r *registry) unwatchLocked(w *watcher) {
	if w.id != "" && r.byID[w.id] == w {
		delete(r.byID, w.id)
	}
	r.disarmLocked(w)
	delete(r.disarmed, w)
	for _, k := range w.keys {
		if m := r.byKey[k]; m != nil {
			delete(m, w)
			if len(m) == 0 {
				delete(r.byKey, k)
			}
		}
	}
}

// direct makes w, the watcher of claim id, learn of each removal of the
// claim just ahead of it from the Backend's own channel (see behind in
// scripts.go), which is subscribed from New on: it then waits for the
// claims ahead without subscribing to their channels (see channels), so
// without the check once a subscription is confirmed. For a claim that
// waits only for the claim just ahead (backend.Ahead) that is every event
// it waits for.
func (r *registry) direct(w *watcher, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w.id = id
	r.byID[id] = w
}

// behind dispatches the removal of the claim just ahead of claim id,
// heard on the Backend's own channel, to the watcher of that claim, as
// event does the events of claim channels.
func (r *registry) behind(id string, e claimEvent, head time.Time, recorded bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.byID[id]; w != nil {
		r.deliverLocked(w, e, departed, head, recorded)
	}
}

// disarm starts a read: from now on w records what it hears.
func (r *registry) disarm(w *watcher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.disarmLocked(w)
}

// lastHandoff returns the last departure from the head of its queue that
// w heard (on the channels of the claims it waits for), armed or not: the
// fact stays true however late it is used (see wait.go's handedOff). It
// returns none if the subscriber's stream has broken since gaps was
// gapCount: the deletion of the waiter's own lease, which the stream
// would have brought before the release, may have been lost in the gap.
func (r *registry) lastHandoff(w *watcher, gaps uint64) handoff {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gaps.Load() != gaps {
		return handoff{}
	}
	return w.handoff
}

// gapCount returns how many times the subscriber's stream has broken or
// been restored so far: a waiter notes it as it begins a read. It takes
// no lock: every enqueue notes it, an uncontended one included.
func (r *registry) gapCount() uint64 { return r.gaps.Load() }

func (r *registry) disarmLocked(w *watcher) {
	if w.armed {
		for _, l := range w.leases {
			if m := r.byLease[l]; m != nil {
				delete(m, w)
				if len(m) == 0 {
					delete(r.byLease, l)
				}
			}
		}
	}
	w.armed, w.want, w.leases = false, nil, nil
	w.seen, w.seenLeases, w.stale = w.seen[:0], w.seenLeases[:0], false
	w.readFrom = r.ponged
	r.disarmed[w] = struct{}{}
	delete(r.unconfirmed, w)
	// A signal still pending predates the read that follows.
	select {
	case <-w.wake:
	default:
	}
}

// arm ends a read: w now waits for what want names (for an Observe, any
// event of its keys) and the end of leases, subscribing to the channels
// that needs. It reports false, leaving w disarmed, when something w now
// waits for was heard during the read: the read may be stale, so the
// caller reads again at once. When it subscribed to a channel, w is also
// woken once the subscription is confirmed, to read again.
func (r *registry) arm(w *watcher, want []wanted, leases []backend.LeaseID) bool {
	r.subMu.Lock()
	defer r.subMu.Unlock()
	r.mu.Lock()
	if !r.armable(w, want, leases) {
		// Start recording afresh for the read the caller makes now.
		w.seen, w.seenLeases, w.stale = w.seen[:0], w.seenLeases[:0], false
		w.woke = wokeEvent
		r.mu.Unlock()
		return false
	}
	add, drop, ping := r.retain(w, r.channels(w, want))
	r.armLocked(w, want, leases)
	r.mu.Unlock()
	r.send(add, drop, ping)
	return true
}

func (r *registry) armLocked(w *watcher, want []wanted, leases []backend.LeaseID) {
	set := make(map[claimEvent]bool, len(want))
	for _, e := range want {
		set[e.claimEvent] = set[e.claimEvent] || e.admission
	}
	delete(r.disarmed, w)
	w.armed, w.want, w.leases, w.woke = true, set, leases, 0
	for _, l := range leases {
		m := r.byLease[l]
		if m == nil {
			m = map[*watcher]struct{}{}
			r.byLease[l] = m
		}
		m[w] = struct{}{}
	}
	r.armConfirm(w)
}

// onlyConfirmed reports whether the last wake of w since it was armed was
// only the confirmation of its subscriptions.
func (r *registry) onlyConfirmed(w *watcher) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return w.woke == wokeConfirmed
}

// armable reports whether nothing w heard while disarmed concerns what it
// is about to wait for.
func (r *registry) armable(w *watcher, want []wanted, leases []backend.LeaseID) bool {
	if w.stale {
		return false
	}
	for _, e := range w.seen {
		for _, x := range want {
			if x.claimEvent == e.claimEvent && (e.what == departed || x.admission) {
				return false
			}
		}
	}
	for _, l := range w.seenLeases {
		if slices.Contains(leases, l) {
			return false
		}
	}
	return true
}

// Events scripts publish on a claim's channel: what happened to it.
const (
	admitted = 'a'
	departed = 'd'
)

// event dispatches what happened to a claim, admitted or departed, heard
// on the claim's channel; head is the server's clock at a departure from
// the head of the queue, zero otherwise, and recorded whether that run
// recorded it in the claim behind. A waiter wakes for the departure
// of a claim it waits for, and for its admission only if it said so.
// Observes take the key's channel instead (see observers.go).
func (r *registry) event(e claimEvent, what byte, head time.Time, recorded bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.byKey[e.key] {
		if !w.any {
			r.deliverLocked(w, e, what, head, recorded)
		}
	}
}

// deliverLocked gives waiter w an event of claim e: a departure from the
// head is kept as its last handoff; armed, it wakes if it waits for e;
// reading, it records e for arm to weigh. Guarded by registry.mu.
func (r *registry) deliverLocked(w *watcher, e claimEvent, what byte, head time.Time, recorded bool) {
	if what == departed && !head.IsZero() {
		w.handoff = handoff{e, head, recorded}
	}
	admissionToo, waited := w.want[e]
	switch {
	case !w.armed:
		w.hear(e, what)
	case waited && (what == departed || admissionToo):
		w.wakeFor(wokeEvent)
	}
}

// resubscribed wakes every watcher: events may have been missed while the
// subscription was down, so each reads once more.
func (r *registry) resubscribed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gapEnded()
	r.wakeAllLocked()
}

// wakeAll wakes every watcher and observer (the Backend is closing).
func (r *registry) wakeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wakeAllLocked()
	for _, m := range r.observers {
		for o := range m {
			o.wake()
		}
	}
}

func (r *registry) wakeAllLocked() {
	for _, m := range r.byKey {
		for w := range m {
			w.stale = true
			w.wakeFor(wokeEvent)
		}
	}
}

// leaseEnded wakes the watchers waiting on lease id and reports whether
// anything in this Backend has an interest in it (so that it should be
// reaped at once).
func (r *registry) leaseEnded(id backend.LeaseID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.disarmed {
		if len(w.seenLeases) < maxSeen {
			w.seenLeases = append(w.seenLeases, id)
		} else {
			w.stale = true
		}
	}
	for w := range r.byLease[id] {
		w.wakeFor(wokeEvent)
	}
	return len(r.byLease[id]) > 0 || len(r.claims[id]) > 0 || r.observedLease(id)
}
