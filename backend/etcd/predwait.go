package etcd

import "sync"

// Predecessor waits.
//
// A waiter read the claim just ahead of it at revision from-1 and waits for
// that claim's delete, which is at a revision >= from. The obvious watch
// starts at from. But from is in the past by the time the watch reaches
// etcd whenever anything else was written meanwhile, which under
// contention is nearly always, and etcd serves a watch that starts at or
// below its current revision from its "unsynced" set, which it catches up
// on a 100ms timer: a delete in the first 100ms of such a watch reaches the
// waiter up to 100ms late, and a handoff stalls for that long. Near the
// head of a short queue that is most handoffs (measured: see
// predStartNow).
//
// So the watch starts at etcd's current revision instead (StartRevision 0),
// which etcd serves from its fast path at once. Its created answer carries
// a revision h such that every delete above h is delivered. If h < from
// that covers everything. Otherwise the deletes in [from, h] were not
// watched, and one read of the key at revision c >= h (c = h when the
// member can serve that revision, see stillThere) closes the gap:
//
//   - the key absent, or present with a create revision >= from (another
//     incarnation, created after ours was deleted): the claim ahead is
//     gone, and the waiter looks at its queue again at once;
//   - the key present with a create revision < from: the same incarnation
//     still exists at c (an incarnation, once deleted, never comes back),
//     so its delete is above c >= h, where the watch sees it. The waiter
//     goes on waiting, and the watch's resume revision becomes c+1.
//
// Either way no delete is missed, and a wake is only a hint in any case:
// both callers look at the queue again with a Txn after every wake, and
// that Txn decides. If the stream breaks, the watch is created again from
// its resume revision (from, or c+1 once a read has moved it), which
// leaves no gap to close.
//
// The read costs one round trip, a cheap one (a single key, usually from
// the member's own store), paid only by waits whose gap is not empty
// (about two in three under contention), and it is off the handoff's
// critical path unless the waiter is next in line.

// predStartNow selects that scheme; with it false, predecessor watches
// start at from, with no read and etcd's 100ms catch-up instead. Measured
// with BenchmarkHandoff (8 contenders, one key): 73 handoffs/s starting at
// from, the same stall as etcd's Mutex (68/s), against about 590/s
// starting now.
const predStartNow = true

// predWait is the target of one predecessor watch.
type predWait struct {
	created chan struct{} // cap 1: signalled after each watchCreated
	done    chan struct{} // closed by keyDeleted or watchFailed
	err     error         // written before done is closed: why the watch failed

	mu      sync.Mutex
	covered int64 // from the last watchCreated: every delete >= covered is delivered
}

func newPredWait() *predWait {
	return &predWait{created: make(chan struct{}, 1), done: make(chan struct{})}
}

func (p *predWait) watchCreated(from int64) {
	p.mu.Lock()
	p.covered = from
	p.mu.Unlock()
	select {
	case p.created <- struct{}{}:
	default: // a signal is pending; the waiter reads the latest value
	}
}

// The mux makes at most one of these two calls per watch.
func (p *predWait) keyDeleted(int64)      { close(p.done) }
func (p *predWait) watchFailed(err error) { p.err = err; close(p.done) }

func (p *predWait) coveredFrom() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.covered
}
