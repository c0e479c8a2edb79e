package memory

// Non-fair requests (AcquireRequest.Fair false) take no place in any queue
// while they wait: each is on the list of non-fair waiters of every one of
// its keys, without a token. Only a removal from a queue can make room for
// one, so after every removal the key's non-fair waiters are looked at, in
// arrival order, and each that a claim made now would let hold every key
// takes its token and its places at once. Fair claims go first: a key
// whose queue has a claim not yet free admits no new claim at all.

// waitUnfair puts c, a non-fair request that cannot hold now, on the
// lists of non-fair waiters of its keys.
func (c *claim) waitUnfair() {
	c.state = stateWaitingUnfair
	for i := range c.nKeys() {
		e := c.entryAt(i)
		e.key.unfair.pushBack(e)
	}
}

// leaveUnfair takes c off the lists of non-fair waiters of its keys.
func (c *claim) leaveUnfair() {
	for i := range c.nKeys() {
		e := c.entryAt(i)
		e.key.unfair.remove(e)
	}
}

// holdsNow reports whether a claim like c made now would hold every key
// of c at once.
func (c *claim) holdsNow() bool {
	for i := range c.nKeys() {
		if !c.entryAt(i).key.admitsNew(c.shared, c.permits) {
			return false
		}
	}
	return true
}

// admitUnfairLocked lets in the non-fair waiters of k that can now hold
// all their keys. Each one admitted is woken; the others are not. It stops
// once no claim of any kind made now could be free at k: of the kinds that
// agree with k's queue, a shared claim is the one the rule admits most
// readily when n is 1.
func (b *Backend) admitUnfairLocked(k *keyState) {
	for e := k.unfair.head; e != nil && k.admitsNew(k.permits == 1, k.permits); {
		// Admitting e's claim takes its entries off the non-fair lists of
		// its keys, e included, but no other claim's: next stays valid.
		next := e.next
		if c := e.c; c.holdsNow() {
			c.leaveUnfair()
			c.token = b.nextTokenLocked()
			b.enqueueLocked(c)
		}
		e = next
	}
}
