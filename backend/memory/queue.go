package memory

import (
	"math/bits"

	"github.com/ash-lock/ashlock/backend"
)

// keyState is the store's record of one key. It exists while the key has a
// claim or a waiting request, and the most recently freed key stays parked
// in the map after that (see parkLocked), so a process that touches many
// keys does not accumulate them.
//
// # The queue rule
//
// The queue holds the key's entries in token order. An entry is free (the
// rule admits it at this key) when the entries ahead of it allow:
//
//   - exclusive: none is ahead;
//   - shared: no exclusive entry is ahead;
//   - counted (n > 1): fewer than n are ahead.
//
// Each condition only gets easier as entries ahead leave, and entries join
// only at the back, so an entry once free stays free, and the free entries
// are a prefix of the queue: an entry blocked by something ahead blocks
// (or is blocked with) everything behind it. The key therefore keeps the
// prefix's length and how many exclusive entries it has, and a pointer to
// the first entry past it, the frontier: whether the frontier is free
// follows from those two counts alone, so a removal advances the frontier
// over exactly the entries it frees, without looking at the holders.
//
// A claim holds once it is free at every one of its keys. A multi-key claim
// free at some keys only keeps its place there, as any claim ahead does;
// since one token orders two claims the same way at every key, a claim
// waits only for claims with smaller tokens, and no cycle of waits (no
// deadlock) can form.
type keyState struct {
	name  string
	queue entryList
	// unfair holds the entries of non-fair requests in arrival order.
	unfair entryList

	frontier  *entry // the first entry not free; nil when all are
	nFree     int32  // entries ahead of the frontier
	nFreeExcl int32  // exclusive entries ahead of the frontier
	permits   int32  // n, agreed by every claim in the queue; stale while the queue is empty

	// used has a bit set for each permit held, for counted keys. It is
	// made on first use and kept while the record lives, so a pool
	// acquired and released again and again allocates it once.
	used *[backend.MaxPermits / 64]uint64
}

func (k *keyState) idle() bool { return k.queue.empty() && k.unfair.empty() }

// admits reports whether e, the frontier (or a new entry behind a free
// queue), is free given the free prefix ahead of it.
func (k *keyState) admits(e *entry) bool {
	switch {
	case k.permits > 1:
		return k.nFree < k.permits
	case e.c.shared:
		return k.nFreeExcl == 0
	default:
		return k.nFree == 0
	}
}

// admitsNew reports whether a claim of the given kind made now would be
// free at k: the queue rule admits it at the back of the queue, and it
// agrees with the queue on n. A nil k is a key with no record: free.
func (k *keyState) admitsNew(shared bool, n int32) bool {
	switch {
	case k == nil || k.queue.empty():
		return true
	case k.frontier != nil || k.permits != n:
		return false
	case n > 1:
		return k.nFree < n
	default:
		return shared && k.nFreeExcl == 0
	}
}

// mayAdmitNew reports whether a claim of some kind made now could be free
// at k; when not, no non-fair waiter of k need be looked at.
func (k *keyState) mayAdmitNew() bool {
	switch {
	case k.queue.empty():
		return true
	case k.frontier != nil:
		return false
	case k.permits > 1:
		return k.nFree < k.permits
	default:
		return k.nFreeExcl == 0
	}
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
	if e.c.exclusive() {
		k.nFreeExcl++
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
	if !k.admits(e) {
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
		if e.c.exclusive() {
			k.nFreeExcl--
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
		if !k.admits(e) {
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
		k.used = new([backend.MaxPermits / 64]uint64)
	}
	words := int(k.permits+63) / 64
	for i, w := range k.used[:words] {
		if w != ^uint64(0) {
			p := int32(i*64 + bits.TrailingZeros64(^w))
			if p >= k.permits {
				break
			}
			k.used[i] |= 1 << (p % 64)
			return p
		}
	}
	panic("memory: a counted key has no free permit")
}

// releasePermit marks permit p of k free.
func (k *keyState) releasePermit(p int32) {
	k.used[p/64] &^= 1 << (p % 64)
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
