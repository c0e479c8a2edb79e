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

// Bounds on what a Backend remembers. One free name per key is the common
// case (one acquisition of the key at a time from this Backend); a few more
// absorb bursts of concurrent waiters from the same Backend. The number of
// keys remembered is capped so that a Backend taking ever-new keys does not
// grow without bound: past the cap an arbitrary key's names are forgotten.
const (
	maxFreeNames = 4
	maxNamedKeys = 4096
)

// namePool holds the free claim names of one Backend, per lock key. Safe for
// concurrent use; the zero value is not usable, see newNamePool.
type namePool struct {
	mu   sync.Mutex
	keys map[string]*freeNames // by lock key
}

// freeNames is a small stack of the free names of one key.
type freeNames struct {
	n     int
	names [maxFreeNames]string
}

func newNamePool() *namePool {
	return &namePool{keys: make(map[string]*freeNames)}
}

// borrow returns a name for a claim on key that no acquisition of this
// Backend is using: a free one if there is one, else a new random UUID. The
// caller owns it until it calls giveBack, which it must do only once the
// claim under the name is known to be gone from etcd.
func (p *namePool) borrow(key string) string {
	p.mu.Lock()
	if f := p.keys[key]; f != nil && f.n > 0 {
		f.n--
		name := f.names[f.n]
		f.names[f.n] = ""
		p.mu.Unlock()
		return name
	}
	p.mu.Unlock()
	return uuid.NewString()
}

// giveBack returns a borrowed name of key to the pool, or forgets it if the
// key already has maxFreeNames free names.
func (p *namePool) giveBack(key, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.keys[key]
	if f == nil {
		if len(p.keys) >= maxNamedKeys {
			// Evict an arbitrary key (map iteration starts at a random
			// place): its names are forgotten, which is always safe.
			for k := range p.keys {
				delete(p.keys, k)
				break
			}
		}
		f = &freeNames{}
		p.keys[key] = f
	}
	if f.n < maxFreeNames {
		f.names[f.n] = name
		f.n++
	}
}
