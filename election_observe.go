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
// the backend (on etcd, one watch), however many there are; each has a
// queue of its own, so a slow one delays no other.
func (e *Election) Observe(ctx context.Context) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		c := e.client
		if c.closed.Load() {
			yield(Leader{}, ErrClosed)
			return
		}
		if err := backend.CheckKey(e.name); err != nil {
			yield(Leader{}, err)
			return
		}
		obs, ok := c.be.(backend.Observer)
		if !ok {
			yield(Leader{}, fmt.Errorf("ashlock: observe %q: backend %T does not implement backend.Observer: %w",
				e.name, c.be, errors.ErrUnsupported))
			return
		}
		h, sub := subscribe(c, obs, e.name)
		defer h.unsubscribe(sub)
		for {
			list, err := h.take(sub)
			for _, l := range list {
				l.Value = bytes.Clone(l.Value) // each observer its own copy
				if !yield(l, nil) {
					return
				}
			}
			if err != nil {
				yield(Leader{}, err)
				return
			}
			select {
			case <-sub.signal:
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
// than one seen, never a term that has ended) and hands to every
// subscriber's queue. A subscriber that joins later starts from the hub's
// current state. The hub lives while it has subscribers: the last one to
// leave cancels its backend Observe, and a hub that ended (the backend
// closed, say) is forgotten at once, so the next Observe makes a new one.

// hubs holds a client's live hubs, one per election name, and guards
// them: a hub's subscribers, its state and its subscribers' queues change
// under this one lock, so that the last subscriber's leaving and a new
// one's joining agree on whether the hub lives.
type hubs struct {
	sync.Mutex
	m map[string]*hub
}

type hub struct {
	reg    *hubs  // the client's hubs, this one among them
	name   string // the election's
	cancel context.CancelFunc

	subs   map[*subscriber]struct{}
	have   bool   // cur holds a state
	cur    Leader // the last state passed on
	maxTok uint64 // the highest term seen
	ended  bool   // the term maxTok has ended: it never comes back
	err    error  // the backend Observe's last word, once it has ended
}

type subscriber struct {
	queue  []Leader      // guarded by hubs
	signal chan struct{} // cap 1: queue or hub.err has something new
}

// subscribe adds a subscriber to the hub of (c, name), starting the hub if
// there is none.
func subscribe(c *LockClient, obs backend.Observer, name string) (*hub, *subscriber) {
	reg := &c.hubs
	reg.Lock()
	defer reg.Unlock()
	h := reg.m[name]
	if h == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h = &hub{reg: reg, name: name, cancel: cancel, subs: make(map[*subscriber]struct{})}
		reg.m[name] = h
		go h.run(ctx, obs)
	}
	s := &subscriber{signal: make(chan struct{}, 1)}
	if h.have {
		s.queue = append(s.queue, h.cur)
	}
	h.subs[s] = struct{}{}
	return h, s
}

// unsubscribe removes s; the last subscriber to leave stops the hub.
func (h *hub) unsubscribe(s *subscriber) {
	h.reg.Lock()
	defer h.reg.Unlock()
	delete(h.subs, s)
	if len(h.subs) == 0 {
		h.forgetLocked()
		h.cancel()
	}
}

// take returns s's queued states, emptied, and the hub's final error if
// the hub has ended and s has had every state before it.
func (h *hub) take(s *subscriber) ([]Leader, error) {
	h.reg.Lock()
	defer h.reg.Unlock()
	q := s.queue
	s.queue = nil
	return q, h.err
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
	if h.have && l.Token == h.cur.Token && l.Owner == h.cur.Owner && bytes.Equal(l.Value, h.cur.Value) {
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
	h.have, h.cur = true, l
	for s := range h.subs {
		s.queue = append(s.queue, l)
		notify(s.signal)
	}
}

// finish records the backend Observe's final error, tells every
// subscriber, and forgets the hub so that later observers get a new one.
func (h *hub) finish(err error) {
	if errors.Is(err, backend.ErrClosed) {
		err = fmt.Errorf("%w: observe %q: the backend was closed", ErrClosed, h.name)
	}
	h.reg.Lock()
	defer h.reg.Unlock()
	h.forgetLocked()
	h.err = err
	for s := range h.subs {
		notify(s.signal)
	}
}

// forgetLocked takes h out of its client's hubs, unless a newer hub of the
// name has replaced it there. h.reg held.
func (h *hub) forgetLocked() {
	if h.reg.m[h.name] == h {
		delete(h.reg.m, h.name)
	}
}
