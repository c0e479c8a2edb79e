package postgres

import (
	"strconv"
	"strings"
	"sync"
)

// ref names one row of a claim: its key and token.
type ref struct {
	key   string
	token int64
}

// event is one notification of the claims trigger (see ddl).
type event struct {
	kind byte // 'd' delete, 'a' admission, 'v' value change
	ref
}

// parseEvent reads a notification payload "<kind><token>:<key>".
func parseEvent(payload string) (event, bool) {
	if len(payload) < 3 {
		return event{}, false
	}
	tok, key, ok := strings.Cut(payload[1:], ":")
	if !ok {
		return event{}, false
	}
	t, err := strconv.ParseInt(tok, 10, 64)
	if err != nil {
		return event{}, false
	}
	return event{kind: payload[0], ref: ref{key: key, token: t}}, true
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

// observer is one Observe of a key: every event of the key signals it.
type observer struct {
	key    string
	signal chan struct{} // cap 1
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
// the caller makes outside the hub's lock.
func (h *hub) dispatch(e event) []lossCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters[e.key] {
		switch {
		case w.reading:
			w.seen = append(w.seen, e)
		case w.want.wakes(e):
			signal(w.wake)
		}
	}
	for o := range h.observers[e.key] {
		signal(o.signal)
	}
	if e.kind != 'd' {
		return nil
	}
	if c, ok := h.lostLocked(h.holders[e.ref]); ok {
		return []lossCall{c}
	}
	return nil
}

// resync tells every waiter and observer to read again, after the
// listener missed events while reconnecting, and returns the holdings to
// verify.
func (h *hub) resync() []*holding {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wakeAllLocked(true)
	seen := make(map[*holding]bool)
	var out []*holding
	for _, c := range h.holders {
		if c.state == held && !seen[c] {
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
