package memory

import (
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// claimState is where a claim stands in its key's life cycle.
type claimState uint8

const (
	// stateQueued: a fair claim behind the holder in its key's queue.
	stateQueued claimState = iota
	// stateWaitingUnfair: a non-fair request waiting for the key's queue to
	// empty. It is not in the queue and has no token yet.
	stateWaitingUnfair
	// stateHolding: the head of its key's queue.
	stateHolding
	// stateGone: removed from the store; why says how.
	stateGone
)

// endReason records why a claim left the store, so that a waiting Acquire
// and OnLost can report it.
type endReason uint8

const (
	endNone endReason = iota
	endReleased
	endCancelled
	endStampFailed
	endExpired // lease ran out (TTL or ExpireLease/ExpireKey)
	endRevoked // lease revoked
	endDeleted // DeleteClaim
	endClosed
)

// links are the two pointers of an intrusive doubly linked list.
type links struct{ prev, next *claim }

// claim is one acquisition in the store. It is kept small because a process
// may hold many: every list it is on is intrusive (no per-claim map entry or
// slice slot), and the wake-up channel exists only while a request waits.
type claim struct {
	key   *keyState
	lease *lease
	id    string // the claim's name: the request's ID, or name
	owner string
	// name is the record's own claim name, made when a request without an
	// ID first uses the record and kept when the record is recycled: a
	// record holds one claim at a time, so no two live claims share it.
	name  string
	token uint64 // 0 while stateWaitingUnfair

	acquiredAt time.Time
	stamp      backend.Timestamp
	onLost     backend.LossListener

	// ready is closed when a waiting request has something to look at:
	// it became the holder or it left the store. nil when nobody waits on
	// the claim or it has already been closed.
	ready chan struct{}

	inKey   links // the key's queue, or its list of non-fair waiters
	inLease links // the lease's claims

	state claimState
	why   endReason
	// returned is set, under the Backend's mutex, when Acquire hands the
	// claim to its caller. Only returned claims get OnLost; a claim lost
	// before that fails its own Acquire instead.
	returned bool
	// reqDone is set, under the Backend's mutex, once the Acquire call that
	// made the claim no longer looks at it (it returned, whatever the
	// outcome). A claim is recycled only when it is both gone from the
	// store and done with by its request: a request woken by the claim's
	// removal still reads its state and reason.
	reqDone bool
}

// wake tells a waiting Acquire to look at the claim again. Each claim is
// woken at most once; later calls are no-ops.
func (c *claim) wake() {
	if c.ready != nil {
		close(c.ready)
		c.ready = nil
	}
}

// export is the Claim handed to Acquire's caller.
func (c *claim) export() backend.Claim {
	return backend.Claim{
		Key:        c.key.name,
		ID:         c.id,
		Lease:      c.lease.id,
		Token:      c.token,
		AcquiredAt: c.acquiredAt,
		Stamp:      c.stamp,
	}
}

// maxFreeClaims bounds the Backend's free list of claims: enough for the
// acquisitions in flight at once in most processes, small enough that an
// idle Backend keeps only a few KiB.
const maxFreeClaims = 64

// newClaimLocked returns a zeroed claim (save its name), recycled when
// one is free: an uncontended acquire/release cycle then allocates nothing
// in the store, not even a name.
func (b *Backend) newClaimLocked() *claim {
	if n := len(b.free); n > 0 {
		c := b.free[n-1]
		b.free[n-1] = nil
		b.free = b.free[:n-1]
		return c
	}
	return &claim{}
}

// doneWithLocked records that c's request no longer looks at c, and
// recycles c if the store is done with it too.
func (b *Backend) doneWithLocked(c *claim) {
	c.reqDone = true
	if c.state == stateGone {
		b.recycleLocked(c)
	}
}

// recycleLocked zeroes c, which neither the store nor its request refers to
// any more, and keeps it for reuse if the free list has room.
func (b *Backend) recycleLocked(c *claim) {
	if len(b.free) < maxFreeClaims {
		*c = claim{name: c.name}
		b.free = append(b.free, c)
	}
}

// claimList is an intrusive doubly linked list of claims threaded through
// the links that at selects. The zero value is an empty list.
type claimList struct {
	head, tail *claim
}

func keyLinks(c *claim) *links   { return &c.inKey }
func leaseLinks(c *claim) *links { return &c.inLease }

func (l *claimList) empty() bool { return l.head == nil }

func (l *claimList) pushBack(c *claim, at func(*claim) *links) {
	ln := at(c)
	ln.prev, ln.next = l.tail, nil
	if l.tail != nil {
		at(l.tail).next = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *claimList) remove(c *claim, at func(*claim) *links) {
	ln := at(c)
	if ln.prev != nil {
		at(ln.prev).next = ln.next
	} else {
		l.head = ln.next
	}
	if ln.next != nil {
		at(ln.next).prev = ln.prev
	} else {
		l.tail = ln.prev
	}
	ln.prev, ln.next = nil, nil
}

// keyState is the store's record of one key. It exists while the key has a
// claim or a waiting request, and the most recently freed key stays parked
// in the map after that (see parkLocked), so a process that touches many
// keys does not accumulate them.
type keyState struct {
	name string
	// queue holds the claims in token order; its head holds the key.
	// Invariant: the head, if any, is in stateHolding and every other
	// claim is stateQueued.
	queue claimList
	// unfair holds non-fair requests in arrival order. Invariant: it is
	// empty whenever queue is, because emptying the queue hands the key to
	// the first of them at once.
	unfair claimList
}

func (k *keyState) idle() bool { return k.queue.empty() && k.unfair.empty() }
