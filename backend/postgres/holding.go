package postgres

import (
	"fmt"
	"slices"

	"github.com/ash-lock/ashlock/backend"
)

// holding is the hub's record of one claim of this Backend, from the
// moment its token is known until it is released or lost, so that a delete
// of any of its rows that the Backend did not make itself reaches OnLost.
type holding struct {
	refs   []ref // one per key
	name   string
	onLost backend.LossListener
	state  holdState
}

type holdState int

const (
	acquiring holdState = iota // Acquire has not returned it yet
	held                       // returned: a loss goes to OnLost
	lost                       // a row was deleted by someone else
	leaving                    // this Backend is deleting it (Release, cleanup)
)

// lossCall is an OnLost call owed.
type lossCall struct {
	to    backend.LossListener
	cause error
}

func (c lossCall) call() {
	if c.to != nil {
		c.to.ClaimLost(c.cause)
	}
}

// hold records c, a claim whose rows now exist, in state acquiring. w is
// the Acquire's waiter, which has kept the events of its keys since before
// the rows were made: a delete among them means c is lost already. It
// reports whether the listener reconnected since w's round began: a
// delete of c's rows may then have been sent while it was away, and the
// reconnection's checks (see resync) did not know c yet, so the caller
// must read c's rows again.
func (h *hub) hold(c *holding, w *waiter) (unsure bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range c.refs {
		h.holders[r] = c
	}
	for _, e := range w.seen {
		if e.kind == 'd' && slices.Contains(c.refs, e.ref) {
			c.state = lost
		}
	}
	return w.resync
}

// promote marks c held once Acquire returns it; it reports false if c was
// lost meanwhile, and then forgets it.
func (h *hub) promote(c *holding) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.state != acquiring {
		h.forgetLocked(c)
		return false
	}
	c.state = held
	return true
}

// leave marks c as being deleted by this Backend: a delete of its rows is
// no loss from now on. Call forget once the delete is done.
func (h *hub) leave(c *holding) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c.state = leaving
}

// find returns the holding that owns row r, if it is this Backend's.
func (h *hub) find(r ref) *holding {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.holders[r]
}

func (h *hub) forget(c *holding) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forgetLocked(c)
}

func (h *hub) forgetLocked(c *holding) {
	for _, r := range c.refs {
		if h.holders[r] == c {
			delete(h.holders, r)
		}
	}
}

// lostLocked marks c lost (if it is this Backend's and not leaving) and
// returns the OnLost call owed, if any: only a claim Acquire returned gets
// one, once.
func (h *hub) lostLocked(c *holding) (lossCall, bool) {
	if c == nil {
		return lossCall{}, false
	}
	switch c.state {
	case acquiring:
		c.state = lost
	case held:
		c.state = lost
		h.forgetLocked(c)
		cause := fmt.Errorf("%w: postgres: claim on %q (token %d) deleted: its lease ended or an operator removed it",
			backend.ErrLeaseExpired, c.refs[0].key, c.refs[0].token)
		return lossCall{to: c.onLost, cause: cause}, true
	}
	return lossCall{}, false
}

// lose is lostLocked for a loss found by a check rather than an event.
func (h *hub) lose(c *holding) (lossCall, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lostLocked(c)
}
