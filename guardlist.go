package ashlock

// guardList is the set of guards registered with one lease, threaded
// through the guards themselves (guardState.inLease) so that joining and
// leaving a lease costs a few pointer writes and no allocation or hashing:
// this sits on every Acquire and Unlock. The zero value is empty. It is
// guarded by watchdog.mu, like the rest of the lease's mutable state.
type guardList struct {
	head *guardState
	n    int
}

// guardLinks are a guard's pointers in its lease's guardList. Whether the
// guard is in a list at all is guardState.listed, so that a second remove
// is a no-op.
type guardLinks struct {
	prev, next *guardState
}

func (l *guardList) len() int { return l.n }

func (l *guardList) push(g *guardState) {
	if g.listed {
		return
	}
	g.inLease, g.listed = guardLinks{next: l.head}, true
	if l.head != nil {
		l.head.inLease.prev = g
	}
	l.head = g
	l.n++
}

func (l *guardList) remove(g *guardState) {
	if !g.listed {
		return
	}
	ln := &g.inLease
	if ln.prev != nil {
		ln.prev.inLease.next = ln.next
	} else {
		l.head = ln.next
	}
	if ln.next != nil {
		ln.next.inLease.prev = ln.prev
	}
	*ln, g.listed = guardLinks{}, false
	l.n--
}

// drain empties the list and returns its guards.
func (l *guardList) drain() []*guardState {
	out := make([]*guardState, 0, l.n)
	for g := l.head; g != nil; {
		next := g.inLease.next
		g.inLease, g.listed = guardLinks{}, false
		out = append(out, g)
		g = next
	}
	*l = guardList{}
	return out
}
