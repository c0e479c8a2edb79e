package postgres

import (
	"sync"

	"github.com/ash-lock/ashlock/backend"
)

// names are the claims this Backend has under way, by lease: each from
// before anything of it is sent (Acquire) until its rows are known to be
// gone (a Release that ran, a failed Acquire's cleanup done, its lease
// ended). A renewal that finds more claims on the lease than these has
// met a claim nobody here holds (see removeLeftBehind).
type names struct {
	*backend.ClaimNames // the names it makes: New, Made

	mu      sync.Mutex
	byLease map[backend.LeaseID]map[string]int // name -> acquisitions under way with it
	// outside counts, by lease, the acquisitions under way that wait for
	// their keys to be free with no rows (see whenFree): counted, each
	// would hide a claim left behind on its lease, perhaps the very one
	// it waits for.
	outside map[backend.LeaseID]int
}

func newNames() *names {
	return &names{ClaimNames: backend.NewClaimNames(), byLease: map[backend.LeaseID]map[string]int{},
		outside: map[backend.LeaseID]int{}}
}

// add records that a claim named name on lease is under way.
func (n *names) add(lease backend.LeaseID, name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.byLease[lease]
	if m == nil {
		m = map[string]int{}
		n.byLease[lease] = m
	}
	m[name]++
}

// done records that the claim named name on lease is gone; a second call
// for the same claim (a Release repeated) changes nothing.
func (n *names) done(lease backend.LeaseID, name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.byLease[lease]
	if m[name] <= 1 {
		delete(m, name)
	} else {
		m[name]--
	}
	if len(m) == 0 {
		delete(n.byLease, lease)
	}
}

// ended forgets every claim of a lease that has ended.
func (n *names) ended(lease backend.LeaseID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.byLease, lease)
	delete(n.outside, lease)
}

// waitOutside records that an acquisition under way on lease starts
// (true) or stops (false) waiting with no rows.
func (n *names) waitOutside(lease backend.LeaseID, yes bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case yes:
		n.outside[lease]++
	case n.outside[lease] <= 1:
		delete(n.outside, lease)
	default:
		n.outside[lease]--
	}
}

// count returns how many distinct claims of lease under way may have rows.
// It may count too few (a caller's name shared by a waiter outside and
// an acquisition with rows), which only makes a renewal list the claims.
func (n *names) count(lease backend.LeaseID) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return max(len(n.byLease[lease])-n.outside[lease], 0)
}

// has reports whether a claim named name on lease is under way.
func (n *names) has(lease backend.LeaseID, name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.byLease[lease][name] > 0
}
