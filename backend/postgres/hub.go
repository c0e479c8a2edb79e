package postgres

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// ref names one row of a claim: its key and token.
type ref struct {
	key   string
	token int64
}

// event is one notification of the claims triggers (see ddl), or a gap.
// A delete names every claim of its key that one statement deleted (gone;
// token is 0), or, as delivered to waiters, one of them (token).
type event struct {
	kind byte // 'i' insert of a waiting claim, 'a' admission, 'v' value change, 'd' delete; gap
	ref
	gone []int64   // a delete's tokens, ascending
	row  entry     // the row after the change; none for a delete
	big  bool      // the row's value was too long for the payload and is not in row
	snap *snapshot // a gap's: the key's queue read after the listener reconnected, if it was
	lost time.Time // a gap's: when the listener's connection was lost
}

// gap is the kind of the event that tells an observer the listener
// reconnected: the notifications sent meanwhile are lost.
const gap = 'g'

// entry is one claim row as an observer keeps it.
type entry struct {
	ver    int64
	single bool // a single-key claim
	q      backend.Queued
}

// payload is the trigger's JSON (see ddl).
type payload struct {
	Kind     string  `json:"e"`
	Token    int64   `json:"t"`
	Key      string  `json:"k"`
	Ver      int64   `json:"r"`
	Shared   bool    `json:"s"`
	Permits  int     `json:"n"`
	Permit   int     `json:"p"`
	Admitted bool    `json:"a"`
	Single   bool    `json:"one"`
	Owner    string  `json:"o"`
	At       *int64  `json:"at"`
	Wall     int64   `json:"sw"`
	Logical  uint32  `json:"sl"`
	Value    []byte  `json:"val"`
	Big      bool    `json:"big"`
	Gone     []int64 `json:"ts"`
}

// parseEvent reads a notification payload.
func parseEvent(s string) (event, bool) {
	var p payload
	if err := json.Unmarshal([]byte(s), &p); err != nil || len(p.Kind) != 1 || p.Key == "" {
		return event{}, false
	}
	e := event{kind: p.Kind[0], ref: ref{key: p.Key, token: p.Token}, big: p.Big}
	if e.kind == 'd' {
		e.gone = p.Gone
		return e, len(e.gone) > 0
	}
	e.row = entry{ver: p.Ver, single: p.Single, q: backend.Queued{
		Kind:     backend.Kind{Shared: p.Shared, Permits: p.Permits},
		Token:    uint64(p.Token),
		Admitted: p.Admitted,
		Permit:   p.Permit,
		Owner:    p.Owner,
		Value:    p.Value,
		Stamp:    backend.Timestamp{WallTime: p.Wall, Logical: p.Logical},
	}}
	if p.At != nil {
		e.row.q.AcquiredAt = time.UnixMicro(*p.At)
	}
	return e, true
}

// hub routes the listener's events to those they concern: waiters (by the
// claims they wait for), holders (their own claims' deletes) and observers
// (every event of their key). Its methods are safe for concurrent use.
type hub struct {
	mu        sync.Mutex
	waiters   map[string]map[*waiter]struct{} // by key
	observers map[string]map[*observer]struct{}
	holders   map[ref]*holding
}

func newHub() *hub {
	return &hub{
		waiters:   make(map[string]map[*waiter]struct{}),
		observers: make(map[string]map[*observer]struct{}),
		holders:   make(map[ref]*holding),
	}
}

// waiter is one Acquire waiting at its keys. Its rounds: begin (events of
// its keys are kept from now on), read the queues, then arm with the
// claims whose events can change its standing: arm reports whether one of
// them came while it read. Then wake signals the next such event.
type waiter struct {
	keys    []string
	reading bool
	seen    []event       // while reading: the events of its keys
	resync  bool          // the listener reconnected: read again
	want    waitSet       // what wakes it once armed
	wake    chan struct{} // cap 1
}

// waitSet names the claims whose events wake a waiter: each one's delete,
// and its admission as well where the value is true.
type waitSet map[ref]bool

// wakes reports whether e is one of the events s waits for.
func (s waitSet) wakes(e event) bool {
	admission, ok := s[e.ref]
	return ok && (e.kind == 'd' || (e.kind == 'a' && admission))
}

// addWaiter registers a waiter on keys; remove it with dropWaiter.
func (h *hub) addWaiter(keys []string) *waiter {
	w := &waiter{keys: keys, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		m := h.waiters[k]
		if m == nil {
			m = make(map[*waiter]struct{})
			h.waiters[k] = m
		}
		m[w] = struct{}{}
	}
	return w
}

func (h *hub) dropWaiter(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range w.keys {
		if m := h.waiters[k]; m != nil {
			delete(m, w)
			if len(m) == 0 {
				delete(h.waiters, k)
			}
		}
	}
}

// begin starts a round: events of w's keys are kept until arm.
func (h *hub) begin(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.reading, w.seen, w.resync, w.want = true, w.seen[:0], false, nil
	select { // a wake-up of the last round is stale now
	case <-w.wake:
	default:
	}
}

// arm ends a round's read: from now on an event of a claim in want wakes
// w. It reports whether such an event, or a reconnection, came during the
// read, in which case the caller reads again at once.
func (h *hub) arm(w *waiter, want waitSet) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.reading, w.want = false, want
	if w.resync {
		return true
	}
	for _, e := range w.seen {
		if want.wakes(e) {
			return true
		}
	}
	return false
}

// observer is one Observe of a key: it gets every event of the key, in
// the order the listener received them, and a gap event after every
// reconnection of the listener. The inbox is unbounded: the listener
// never waits for an observer.
type observer struct {
	key    string
	inbox  []event       // under the hub's mu
	signal chan struct{} // cap 1: the inbox is not empty, or the Backend is closing
}

// take returns o's inbox, emptied.
func (h *hub) take(o *observer) []event {
	h.mu.Lock()
	defer h.mu.Unlock()
	in := o.inbox
	o.inbox = nil
	return in
}

func (h *hub) addObserver(key string) *observer {
	o := &observer{key: key, signal: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.observers[key]
	if m == nil {
		m = make(map[*observer]struct{})
		h.observers[key] = m
	}
	m[o] = struct{}{}
	return o
}

func (h *hub) dropObserver(o *observer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m := h.observers[o.key]; m != nil {
		delete(m, o)
		if len(m) == 0 {
			delete(h.observers, o.key)
		}
	}
}

// dispatch delivers one event and returns the loss calls it owes, which
// the caller makes outside the hub's lock. Observers get a delete event
// whole (one statement's deletes at a key are one change); waiters and
// holders get one event per claim.
func (h *hub) dispatch(e event) []lossCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	for o := range h.observers[e.key] {
		o.inbox = append(o.inbox, e)
		signal(o.signal)
	}
	if e.kind != 'd' {
		h.toWaitersLocked(e)
		return nil
	}
	var calls []lossCall
	for _, t := range e.gone {
		d := event{kind: 'd', ref: ref{key: e.key, token: t}}
		h.toWaitersLocked(d)
		if c, ok := h.lostLocked(h.holders[d.ref]); ok {
			calls = append(calls, c)
		}
	}
	return calls
}

// toWaitersLocked delivers e, an event of one claim, to the waiters of
// its key. h.mu held.
func (h *hub) toWaitersLocked(e event) {
	for w := range h.waiters[e.key] {
		switch {
		case w.reading:
			w.seen = append(w.seen, e)
		case w.want.wakes(e):
			signal(w.wake)
		}
	}
}

// observed returns the keys that have observers.
func (h *hub) observed() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := make([]string, 0, len(h.observers))
	for k := range h.observers {
		keys = append(keys, k)
	}
	return keys
}

// resync tells every waiter and observer to read again, after the
// listener missed events while reconnecting, and returns the holdings to
// verify: those held, and those still being acquired, since an Acquire
// that has recorded its admission reads the queues no more, and its
// claim's delete may be among the events missed. Observers get a gap
// event with their key's queue from snaps, if it has the key.
func (h *hub) resync(snaps map[string]*snapshot, lost time.Time) []*holding {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, m := range h.observers {
		for o := range m {
			o.inbox = append(o.inbox, event{kind: gap, snap: snaps[k], lost: lost})
		}
	}
	h.wakeAllLocked(true)
	seen := make(map[*holding]bool)
	var out []*holding
	for _, c := range h.holders {
		if (c.state == held || c.state == acquiring) && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// wakeAll signals every waiter and observer (the Backend is closing).
func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wakeAllLocked(false)
}

// wakeAllLocked signals every waiter and observer; with resync, each
// waiter reads its queues again even if no event of its names came.
// h.mu held.
func (h *hub) wakeAllLocked(resync bool) {
	for _, m := range h.waiters {
		for w := range m {
			w.resync = w.resync || resync
			signal(w.wake)
		}
	}
	for _, m := range h.observers {
		for o := range m {
			signal(o.signal)
		}
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
