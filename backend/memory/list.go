package memory

// The Backend keeps every collection of claims as an intrusive doubly
// linked list threaded through the claims themselves: holding a claim
// costs no map entry or slice slot, and removing one is O(1).

// entryList is a list of entries (a key's queue, or its non-fair waiters)
// threaded through their prev and next. The zero value is an empty list.
type entryList struct {
	head, tail *entry
}

func (l *entryList) empty() bool { return l.head == nil }

func (l *entryList) pushBack(e *entry) {
	e.prev, e.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
}

func (l *entryList) remove(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// claimList is a lease's list of claims, threaded through their inLease
// links. The zero value is an empty list.
type claimList struct {
	head, tail *claim
}

// links are the two pointers of a claim on its lease's list.
type links struct{ prev, next *claim }

func (l *claimList) pushBack(c *claim) {
	c.inLease.prev, c.inLease.next = l.tail, nil
	if l.tail != nil {
		l.tail.inLease.next = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *claimList) remove(c *claim) {
	ln := &c.inLease
	if ln.prev != nil {
		ln.prev.inLease.next = ln.next
	} else {
		l.head = ln.next
	}
	if ln.next != nil {
		ln.next.inLease.prev = ln.prev
	} else {
		l.tail = ln.prev
	}
	ln.prev, ln.next = nil, nil
}
