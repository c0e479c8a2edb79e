package redis

import (
	"sync"

	"github.com/ash-lock/ashlock/backend"
)

// tracked is a claim this Backend made, from the start of its Acquire until
// it is released or lost, so that the end of its lease reaches OnLost.
type tracked struct {
	lease  backend.LeaseID
	onLost backend.LossListener
	ref    claimRef

	mu    sync.Mutex
	state trackState
}

type trackState int

const (
	pending trackState = iota // Acquire has not returned it yet
	holding                   // returned; a loss calls OnLost
	lost                      // its lease ended
	done                      // released, or its Acquire failed
)

// claimRef names a returned claim: its first key and token.
type claimRef struct {
	key   string
	token uint64
}

// track registers a claim being acquired on lease.
func (r *registry) track(lease backend.LeaseID, onLost backend.LossListener) *tracked {
	t := &tracked{lease: lease, onLost: onLost}
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
	r.mu.Unlock()
	return true
}

// isLost reports whether t's lease is known to have ended.
func (t *tracked) isLost() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state == lost
}

// untrack forgets t. Once it returns, OnLost is not called for t; a call
// already under way has returned.
func (r *registry) untrack(t *tracked) {
	t.mu.Lock()
	t.state = done
	t.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
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
		}
		t.mu.Unlock()
	}
}
