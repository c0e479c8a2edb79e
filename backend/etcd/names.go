package etcd

import (
	"sync"

	"github.com/google/uuid"
)

// Claim names are lent, not minted.
//
// etcd keeps a deleted key in its index, as a tombstone, until the next
// compaction, and a range read walks every key of the range, dead ones
// included. The enqueue Txn and the waiters' checks read a key's whole queue
// directory, so if every acquisition named its claim afresh, each one would
// leave a dead name behind and every later read of the directory would be
// slower, until an operator (or etcd's auto-compaction, off by default)
// compacted. Instead, each Backend keeps a few free names per lock key and
// lends one to each Acquire; a key taken over and over by one Backend then
// uses the same one or two names for ever, as etcd's own Mutex does with its
// session-named key.
//
// The rule that keeps lending safe: a name goes back to the pool only once
// the claim under it is known to be gone from etcd - the release Txn
// succeeded (whether it deleted the claim or found it already gone), or the
// removal of a failed Acquire's claim succeeded (by create revision, or by
// name alone after a lost reply). A name whose fate is unknown - a release
// that failed, a removal still being retried in the background, a claim
// lost with its lease - is simply not given back; forgetting a name is
// always safe, the next Acquire makes a new one. So at any moment a name is
// used by at most one acquisition of this Backend, and names of different
// Backends are independent random UUIDs. That keeps what fresh names gave:
//
//   - cleanup finds its claim by name even when the enqueue's reply was
//     lost, and deleting by that name cannot hit another acquisition's
//     claim, because no other acquisition holds the name meanwhile;
//   - identity is still name + create revision: a later incarnation of a
//     name has a higher create revision (etcd's revision counter only
//     grows), so tokens stay strictly increasing and a late Release or
//     renewal aimed at an earlier incarnation compares unequal.
//
// A free name keeps the watch its last claim was watched with, parked (see
// mux.park): the next acquisition that borrows the name adopts it instead
// of creating a watch and cancelling it again, so a key taken over and over
// costs its Backend no watch traffic but the one delete event of each
// release (or none at all, while the key's claims are released within the
// claim watch delay: see latewatch.go). A parked watch is for no incarnation yet (its resume revision is
// unknown, as for a watch started before its claim exists), so adopting it
// is exactly as safe as starting a new watch early.

// Bounds on what a Backend remembers. One free name per key is the common
// case (one acquisition of the key at a time from this Backend); a few more
// absorb bursts of concurrent waiters from the same Backend. The number of
// keys remembered is capped so that a Backend taking ever-new keys does not
// grow without bound: past the cap an arbitrary key's names are forgotten.
// Parked watches are capped separately, since each costs etcd a watcher:
// past the cap, a released claim's watch is cancelled, as it would be
// without parking, and its name is kept without one.
const (
	maxFreeNames     = 4
	maxNamedKeys     = 4096
	maxParkedWatches = 1024
)

// namePool holds the free claim names of one Backend, per lock key, with
// their parked watches. Safe for concurrent use; the zero value is not
// usable, see newNamePool.
type namePool struct {
	stop func(*keyWatch)             // ends a parked watch the pool lets go of
	read func(key string) *queueRead // builds a key's queue read

	mu     sync.Mutex
	keys   map[string]*freeNames // by lock key
	parked int                   // watches held in keys
}

// freeNames is a small stack of the free names of one key, each with its
// parked watch or nil, and whether its last claim was a short hold, and
// the key's queue read (kept as long as the key is remembered).
type freeNames struct {
	q       *queueRead
	n       int
	names   [maxFreeNames]string
	watches [maxFreeNames]*keyWatch
	short   [maxFreeNames]bool
}

// newNamePool returns an empty pool; stop is called, without the pool's
// lock, for each parked watch the pool drops. read, if not nil, builds a
// key's queue read (see borrow).
func newNamePool(stop func(*keyWatch), read func(key string) *queueRead) *namePool {
	return &namePool{stop: stop, read: read, keys: make(map[string]*freeNames)}
}

// A loan is what borrow hands an acquisition for one claim on a key.
type loan struct {
	name  string
	watch *keyWatch  // the name's parked watch, or nil
	short bool       // the name's last claim was a short hold (see latewatch.go)
	queue *queueRead // the key's queue read: the one kept, or one built now
}

// borrow lends a name for a claim on key that no acquisition of this
// Backend is using, with its parked watch if it has one: a free name if
// there is one, else a new random UUID. The loan's short reports that the
// name came back through giveBackShort. The caller owns the name and the
// watch until it calls giveBack or giveBackShort, which it must do only
// once the claim under the name is known to be gone from etcd. The loan
// also carries the key's queue read, built when the pool first meets the
// key and kept while it remembers it (nil with no read function).
func (p *namePool) borrow(key string) loan {
	p.mu.Lock()
	f, drop := p.entryLocked(key)
	l := loan{queue: f.q}
	if f.n > 0 {
		f.n--
		l.name, l.watch, l.short = f.names[f.n], f.watches[f.n], f.short[f.n]
		f.names[f.n], f.watches[f.n], f.short[f.n] = "", nil, false
		if l.watch != nil {
			p.parked--
		}
	}
	p.mu.Unlock()
	for _, w := range drop {
		p.stop(w)
	}
	if l.name == "" {
		l.name = uuid.NewString()
	}
	return l
}

// giveBack returns a borrowed name of key to the pool, with w, the name's
// parked watch (nil if none). The name is forgotten if the key already has
// maxFreeNames free names, and w is stopped if the name is forgotten or the
// pool already holds maxParkedWatches watches.
func (p *namePool) giveBack(key, name string, w *keyWatch) {
	p.put(key, name, w, false)
}

// giveBackShort is giveBack, without a watch, for a name whose claim was
// released young: the next borrower hears short.
func (p *namePool) giveBackShort(key, name string) {
	p.put(key, name, nil, true)
}

func (p *namePool) put(key, name string, w *keyWatch, short bool) {
	p.mu.Lock()
	f, drop := p.entryLocked(key)
	if f.n == maxFreeNames || (w != nil && p.parked >= maxParkedWatches) {
		if w != nil {
			drop = append(drop, w)
			w = nil
		}
	}
	if f.n < maxFreeNames {
		f.names[f.n], f.watches[f.n], f.short[f.n] = name, w, short
		f.n++
		if w != nil {
			p.parked++
		}
	}
	p.mu.Unlock()
	for _, w := range drop {
		p.stop(w)
	}
}

// forgetLocked appends f's parked watches to drop.
// entryLocked returns key's entry, making it (with the key's queue read)
// if the pool does not remember key; past maxNamedKeys that evicts an
// arbitrary key, whose parked watches it returns for the caller to stop
// once it has let go of the lock. p.mu must be held.
func (p *namePool) entryLocked(key string) (*freeNames, []*keyWatch) {
	if f := p.keys[key]; f != nil {
		return f, nil
	}
	var drop []*keyWatch
	if len(p.keys) >= maxNamedKeys {
		// Evict an arbitrary key (map iteration starts at a random
		// place): its names are forgotten, which is always safe.
		for k, ev := range p.keys {
			drop = p.forgetLocked(ev, drop)
			delete(p.keys, k)
			break
		}
	}
	f := &freeNames{}
	if p.read != nil {
		// Under the lock: read only builds an Op, once per key
		// remembered.
		f.q = p.read(key)
	}
	p.keys[key] = f
	return f, drop
}

func (p *namePool) forgetLocked(f *freeNames, drop []*keyWatch) []*keyWatch {
	for _, w := range f.watches[:f.n] {
		if w != nil {
			drop = append(drop, w)
			p.parked--
		}
	}
	return drop
}
