package memory

import (
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// claimState is where a claim stands in its life cycle.
type claimState uint8

const (
	// stateQueued: a claim in the queue of each of its keys that does not
	// hold all of them yet.
	stateQueued claimState = iota
	// stateWaitingUnfair: a non-fair request waiting until a claim made
	// now would hold every key. It is on its keys' lists of non-fair
	// waiters, not in their queues, and has no token yet.
	stateWaitingUnfair
	// stateHolding: the claim holds every one of its keys.
	stateHolding
	// stateGone: removed from the store; why says how.
	stateGone
)

// endReason records why a claim left the store, so that a waiting Acquire
// and OnLost can report it.
type endReason uint8

const (
	// endOwn: removed by its own request (released, cancelled, or its
	// stamp refused), which never asks why.
	endOwn     endReason = iota
	endExpired           // lease ran out (TTL or ExpireLease/ExpireKey)
	endRevoked           // lease revoked
	endDeleted           // DeleteClaim
	endClosed
)

// entry is a claim's place at one of its keys: in the key's queue, or on
// its list of non-fair waiters. A single-key claim has one entry, inside
// the claim itself; a multi-key claim one per key, all with its token.
type entry struct {
	c          *claim
	key        *keyState
	prev, next *entry // on the key's queue or list of non-fair waiters
	// free: the queue rule admits the entry at its key (see queue.go). A
	// claim holds once every one of its entries is free.
	free bool
}

// claim is one acquisition in the store. It is kept small because a process
// may hold many: every list it is on is intrusive (no per-claim map entry or
// slice slot), and the wake-up channel exists only while a request waits.
type claim struct {
	first entry       // the entry at Key
	x     *claimExtra // nil unless the claim has a value or is multi-key
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
	// its claim came to hold every key, or it left the store. nil when
	// nobody waits on the claim or it has already been closed.
	ready chan struct{}

	inLease links // the lease's claims

	permits int32 // n: 1 for exclusive and shared claims
	permit  int32 // the permit held, once holding
	shared  bool
	state   claimState
	why     endReason
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

// claimExtra is what only some claims need, kept out of line so that a
// plain claim (one key, no value: most of them) costs one pointer for it.
type claimExtra struct {
	value []byte   // the Backend's own copy; replaced, never written into
	keys  []string // the request's Keys (a copy); nil unless multi-key
	more  []entry  // the entries at keys[1:]; never reallocated once linked
	nFree int32    // how many entries of a multi-key claim are free
}

// extra returns c's claimExtra, making it if c has none yet.
func (c *claim) extra() *claimExtra {
	if c.x == nil {
		c.x = &claimExtra{}
	}
	return c.x
}

func (c *claim) isMulti() bool { return c.x != nil && c.x.keys != nil }

// nKeys is the number of keys (and entries) of the claim.
func (c *claim) nKeys() int32 {
	if !c.isMulti() {
		return 1
	}
	return int32(len(c.x.keys))
}

// entryAt returns the claim's entry at its i-th key, in the request's
// (sorted) key order.
func (c *claim) entryAt(i int32) *entry {
	if i == 0 {
		return &c.first
	}
	return &c.x.more[i-1]
}

// value returns the value published with the claim.
func (c *claim) value() []byte {
	if c.x == nil {
		return nil
	}
	return c.x.value
}

// noteFree records that one more of c's entries is free, and reports
// whether all of them are: whether c now holds.
func (c *claim) noteFree() bool {
	if !c.isMulti() {
		return true
	}
	c.x.nFree++
	return c.x.nFree == int32(len(c.x.keys))
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
	var keys []string // nil unless the claim is multi-key
	if c.isMulti() {
		keys = c.x.keys
	}
	return backend.Claim{
		Key:        c.first.key.name,
		Keys:       keys,
		ID:         c.id,
		Lease:      c.lease.id,
		Token:      c.token,
		AcquiredAt: c.acquiredAt,
		Stamp:      c.stamp,
		Shared:     c.shared,
		Permits:    int(c.permits),
		Permit:     int(c.permit),
		Value:      c.value(),
	}
}

// maxFreeClaims bounds the Backend's free list of claims: enough for the
// acquisitions in flight at once in most processes, small enough that an
// idle Backend keeps only a few KiB.
const maxFreeClaims = 64

// A recycled record is about to hold another acquisition, so nobody who
// knew it before may touch it again. Within the store every link to a claim
// (its entries in its keys' queues and non-fair lists, its place on its
// lease's list) is cut by removeLocked before the record can be recycled,
// and the observation marks name keys, not claims. Callers hold a
// backend.Claim, a copy that Release and SetValue match again by key, name
// and token (a token is never reused), and an OnLost delivery carries the
// listener and a cause read before the removal. Only the Acquire call that
// made the claim holds the record itself: it keeps it across its wait, and
// across its stamp call with the mutex dropped, and a loss may remove the
// claim meanwhile. So a record is recycled only once both are done with
// it: the store (the claim is gone) and its request (reqDone, set by
// doneWithLocked). Code that needs a claim's fields after its removal reads
// them before calling removeLocked, which may recycle it (see loseLocked).

// newClaimLocked returns a zeroed claim (save its name), recycled when
// one is free: an uncontended acquire/release cycle then allocates nothing
// in the store, not even a name.
func (b *Backend) newClaimLocked() *claim {
	var c *claim
	if n := len(b.free); n > 0 {
		c = b.free[n-1]
		b.free[n-1] = nil
		b.free = b.free[:n-1]
	} else {
		c = &claim{}
	}
	c.first.c = c
	return c
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
