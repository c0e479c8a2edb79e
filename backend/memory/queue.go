package memory

import (
	"github.com/ash-lock/ashlock/backend"
)

// keyState is the store's record of one key. It exists while the key has a
// claim or a waiting request, and the most recently freed key stays parked
// in the map after that (see parkLocked), so a process that touches many
// keys does not accumulate them.
//
// # The frontier
//
// The queue holds the key's entries in token order, and an entry is free
// when backend.Admits, the queue rule, admits it at this key. The free
// entries are a prefix of the queue and an entry once free stays free, so
// the key keeps the prefix's length, how many of its entries are not
// shared, and a pointer to the first entry past it, the frontier: those
// counts are all the rule asks about the entries ahead of the frontier
// (the queue agrees on n, so none is of another kind), and a removal
// advances the frontier over exactly the entries it frees, without looking
// at the holders.
//
// A claim holds once it is free at every one of its keys; a multi-key
// claim free at some keys only keeps its place there, as any claim ahead
// does.
type keyState struct {
	name  string
	queue entryList
	// unfair holds the entries of non-fair requests in arrival order.
	unfair entryList

	frontier   *entry // the first entry not free; nil when all are
	nFree      int32  // entries ahead of the frontier
	nFreeNonSh int32  // entries ahead of the frontier that are not shared
	permits    int32  // n, agreed by every claim in the queue; stale while the queue is empty

	// used holds the permits held, for counted keys. It is made on first
	// use and kept while the record lives, so a pool acquired and released
	// again and again allocates it once.
	used *backend.PermitSet
}

func (k *keyState) idle() bool { return k.queue.empty() && k.unfair.empty() }

// admitsNext reports whether the rule admits a claim of the given kind
// behind the free prefix: e, the frontier, or a new entry behind a queue
// that is all free.
func (k *keyState) admitsNext(shared bool, n int32) bool {
	return backend.Admits(backend.Kind{Shared: shared, Permits: int(n)}, int(k.nFree), int(k.nFreeNonSh), false)
}

// admitsNew reports whether a claim of the given kind made now would be
// free at k: it agrees with the queue on n and the rule admits it at the
// back of the queue. A nil k is a key with no record: free.
func (k *keyState) admitsNew(shared bool, n int32) bool {
	switch {
	case k == nil || k.queue.empty():
		return true
	case k.frontier != nil || k.mismatch(n):
		return false
	}
	return k.admitsNext(shared, n)
}

// mismatch reports whether a claim with n permits may not join k's queue.
func (k *keyState) mismatch(n int32) bool {
	return k != nil && !k.queue.empty() && k.permits != n
}

// markFree records that e, the frontier or a new entry behind a free
// queue, is free, and reports whether its claim is now free at every key.
func (k *keyState) markFree(e *entry) bool {
	e.free = true
	k.nFree++
	if !e.c.shared {
		k.nFreeNonSh++
	}
	return e.c.noteFree()
}

// push appends e to k's queue, free at once if the rule admits it.
// It reports whether e's claim is now free at every key.
func (k *keyState) push(e *entry) bool {
	if k.queue.empty() {
		k.permits = e.c.permits
	}
	k.queue.pushBack(e)
	if k.frontier != nil {
		return false
	}
	if !k.admitsNext(e.c.shared, e.c.permits) {
		k.frontier = e
		return false
	}
	return k.markFree(e)
}

// unlink takes e out of k's queue without admitting anyone; advanceLocked
// does that once every entry of the departing claim is out.
func (k *keyState) unlink(e *entry) {
	if e.free {
		k.nFree--
		if !e.c.shared {
			k.nFreeNonSh--
		}
		e.free = false
	}
	if k.frontier == e {
		k.frontier = e.next
	}
	k.queue.remove(e)
}

// advanceLocked moves k's frontier over the entries the rule now admits,
// promoting each claim that thereby comes to hold all its keys. It wakes
// exactly those claims: after a counted holder leaves, the one next
// waiter; after a writer leaves, every reader up to the next writer.
func (b *Backend) advanceLocked(k *keyState) {
	for e := k.frontier; e != nil; e = e.next {
		if !k.admitsNext(e.c.shared, e.c.permits) {
			k.frontier = e
			return
		}
		if k.markFree(e) {
			b.promoteLocked(e.c)
		}
	}
	k.frontier = nil
}

// takePermit returns the lowest permit of k that no holder has, and marks
// it held. Holders of a counted key come to hold it in token order (they
// are its free prefix), so the tokens of successive holders of one permit
// increase. There is always one free: k has fewer than n holders.
func (k *keyState) takePermit() int32 {
	if k.used == nil {
		k.used = new(backend.PermitSet)
	}
	p := k.used.Lowest(int(k.permits))
	if p == backend.NoPermit {
		panic("memory: a counted key has no free permit")
	}
	k.used.Set(p)
	return int32(p)
}

// oldestHolder returns the holder of k with the lowest token, or nil. The
// holders are among the free prefix, which may also have multi-key claims
// still waiting at other keys.
func (k *keyState) oldestHolder() *claim {
	for e := k.queue.head; e != nil && e.free; e = e.next {
		if e.c.state == stateHolding {
			return e.c
		}
	}
	return nil
}

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
