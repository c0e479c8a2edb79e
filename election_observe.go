package ashlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"

	"github.com/ash-lock/ashlock/backend"
)

// Observe yields who leads the election: the current leader (a zero
// Leader, but for Name, if nobody leads) first, then each change in
// order: a new term, a change of the leader's value or owner label, and
// "no leader". Each state is yielded once; terms never go backwards.
//
// It waits without polling, and keeps working across interruptions of the
// store: on etcd it resumes from the last revision it saw after a watch
// failure, a reconnection, a leader change or a restart of etcd, and only
// if that revision has been compacted does it read the state again (a
// change inside the compacted gap may then be missed, never reordered).
//
// The sequence ends without an error when ctx ends or the loop breaks. When
// the client is closed it yields ErrClosed once and ends; an invalid name
// yields ErrInvalidKey, and a backend that cannot observe (see
// backend.Observer) an error wrapping errors.ErrUnsupported. Any other
// error the backend cannot recover from is yielded once, last.
//
// All of a client's observers of one election share one observation of
// the backend (on etcd, one watch), however many there are; each reads
// the states at its own pace, so a slow one delays no other.
func (e *Election) Observe(ctx context.Context) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		c := e.lock.client
		if c.closed.Load() {
			yield(Leader{}, ErrClosed)
			return
		}
		if err := backend.CheckKey(e.lock.key); err != nil {
			yield(Leader{}, err)
			return
		}
		obs, ok := c.be.(backend.Observer)
		if !ok {
			yield(Leader{}, fmt.Errorf("ashlock: observe %q: backend %T does not implement backend.Observer: %w",
				e.lock.key, c.be, errors.ErrUnsupported))
			return
		}
		h, at := subscribe(c, obs, e.lock.key)
		defer h.unsubscribe()
		for ; ; at = at.next {
			if at.err != nil {
				yield(Leader{}, at.err)
				return
			}
			if at.have {
				l := at.leader
				l.Value = bytes.Clone(l.Value) // each observer its own copy
				if !yield(l, nil) {
					return
				}
			}
			select {
			case <-at.ready:
			case <-ctx.Done():
				return
			case <-c.wd.stop: // closed by Close
				yield(Leader{}, ErrClosed)
				return
			}
		}
	}
}

// The observers of one election on one client share a hub: one backend
// Observe, whose states the hub filters (only changes, never a term older
// than one seen, never a term that has ended) and appends to the list its
// subscribers walk. A subscriber that joins later starts from the hub's
// current state. The hub lives while it has subscribers: the last one to
// leave cancels its backend Observe, and a hub that ended (the backend
// closed, say) is forgotten at once, so the next Observe makes a new one.

// hubs holds a client's live hubs, one per election name, and guards
// them all: one lock, taken briefly per state and per subscriber.
type hubs struct {
	sync.Mutex
	m map[string]*hub
}

// A hub's states form a list that grows at its tail: each subscriber walks
// it from the state that was the tail when it joined, at its own pace, and
// the states that every subscriber has passed are left to the collector.
// A subscriber that never reads keeps every state after its own alive.
type hub struct {
	reg    *hubs  // the client's hubs, this one among them
	name   string // the election's
	cancel context.CancelFunc

	// guarded by reg
	subs   int
	tail   *state // the last state passed on, or where the list starts
	maxTok uint64 // the highest term seen
	ended  bool   // the term maxTok has ended: it never comes back
}

// state is one state of a hub, or (err set) its last word once the
// backend's Observe has ended.
type state struct {
	have   bool // leader holds a state; false only where the list starts
	leader Leader
	err    error
	next   *state        // set, under the hubs' lock, before ready is closed
	ready  chan struct{} // closed when next is set
}

// subscribe adds a subscriber to the hub of (c, name), starting the hub if
// there is none, and returns where the subscriber starts in its list.
func subscribe(c *LockClient, obs backend.Observer, name string) (*hub, *state) {
	reg := &c.hubs
	reg.Lock()
	defer reg.Unlock()
	h := reg.m[name]
	if h == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h = &hub{reg: reg, name: name, cancel: cancel, tail: &state{ready: make(chan struct{})}}
		reg.m[name] = h
		go h.run(ctx, obs)
	}
	h.subs++
	return h, h.tail
}

// unsubscribe removes a subscriber; the last one to leave stops the hub.
func (h *hub) unsubscribe() {
	h.reg.Lock()
	defer h.reg.Unlock()
	if h.subs--; h.subs == 0 {
		h.forgetLocked()
		h.cancel()
	}
}

// run serves the hub's backend Observe until ctx is cancelled (the last
// subscriber left) or the Observe ends by itself.
func (h *hub) run(ctx context.Context, obs backend.Observer) {
	for info, err := range obs.Observe(ctx, h.name) {
		if err != nil {
			h.finish(err)
			return
		}
		h.offer(leaderOf(h.name, info))
	}
	if ctx.Err() == nil {
		// A backend must end with an error or on ctx's end; one that did
		// neither is not to be trusted further.
		h.finish(fmt.Errorf("%w: observe %q: the backend's observation ended", ErrUnavailable, h.name))
	}
}

// offer passes l on to every subscriber if it is a change the rules let
// through: a later term, a change of the current term's value or owner,
// or the end of the current term.
func (h *hub) offer(l Leader) {
	h.reg.Lock()
	defer h.reg.Unlock()
	if cur := h.tail; cur.have && l.Token == cur.leader.Token && l.Owner == cur.leader.Owner &&
		bytes.Equal(l.Value, cur.leader.Value) {
		return
	}
	switch {
	case l.Token == 0:
		h.ended = true
	case l.Token > h.maxTok:
		h.maxTok, h.ended = l.Token, false
	case l.Token < h.maxTok || h.ended:
		return // an older term, or one that has ended: the store cannot mean it
	}
	h.appendLocked(&state{have: true, leader: l})
}

// finish passes the backend Observe's final error on to every subscriber,
// and forgets the hub so that later observers get a new one.
func (h *hub) finish(err error) {
	if errors.Is(err, backend.ErrClosed) {
		err = fmt.Errorf("%w: observe %q: the backend was closed", ErrClosed, h.name)
	}
	h.reg.Lock()
	defer h.reg.Unlock()
	h.forgetLocked()
	h.appendLocked(&state{err: err})
}

// appendLocked makes s the hub's newest state and wakes the subscribers
// waiting at the one before. h.reg held.
func (h *hub) appendLocked(s *state) {
	s.ready = make(chan struct{})
	h.tail.next = s
	close(h.tail.ready)
	h.tail = s
}

// forgetLocked takes h out of its client's hubs, unless a newer hub of the
// name has replaced it there. h.reg held.
func (h *hub) forgetLocked() {
	if h.reg.m[h.name] == h {
		delete(h.reg.m, h.name)
	}
}
