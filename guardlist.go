package ashlock

// guardList is the set of guards registered with one lease, threaded
// through the guards themselves (Guard.inLease) so that joining and leaving
// a lease costs two pointer writes and no allocation or hashing: this sits
// on every Acquire and Unlock. The zero value is empty. It is guarded by
// watchdog.mu, like the rest of the lease's mutable state.
type guardList struct {
	head *Guard
	n    int
}

// guardLinks are a guard's pointers in its lease's guardList; on is false
// while the guard is not in any list, so that a second remove is a no-op.
type guardLinks struct {
	prev, next *Guard
	on         bool
}

func (l *guardList) len() int { return l.n }

func (l *guardList) push(g *Guard) {
	if g.inLease.on {
		return
	}
	g.inLease = guardLinks{next: l.head, on: true}
	if l.head != nil {
		l.head.inLease.prev = g
	}
	l.head = g
	l.n++
}

func (l *guardList) remove(g *Guard) {
	ln := &g.inLease
	if !ln.on {
		return
	}
	if ln.prev != nil {
		ln.prev.inLease.next = ln.next
	} else {
		l.head = ln.next
	}
	if ln.next != nil {
		ln.next.inLease.prev = ln.prev
	}
	*ln = guardLinks{}
	l.n--
}

// drain empties the list and returns its guards.
func (l *guardList) drain() []*Guard {
	out := make([]*Guard, 0, l.n)
	for g := l.head; g != nil; {
		next := g.inLease.next
		g.inLease = guardLinks{}
		out = append(out, g)
		g = next
	}
	*l = guardList{}
	return out
}
