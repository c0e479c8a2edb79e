package etcd

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Checks: reads that settle what a watch cannot see.
//
// Every watch waits for the delete of one incarnation of its key: the one
// that existed at revision from-1. Two things hide that delete from the
// watch, and a read of the key settles both. Read at revision c, the
// incarnation is gone if the key is absent or exists with a create
// revision >= from (another incarnation, created after ours was deleted);
// otherwise the key has existed without interruption since before from-1
// (a deleted incarnation never comes back: a new one gets a new create
// revision), so ours is still there at c and its delete is above c.
//
// Gaps. etcd serves a watch that starts at or below its current revision
// from its "unsynced" set, which it catches up on a 100ms timer: a delete
// in the first 100ms of such a watch arrives up to 100ms late. A waiter
// would stall a handoff that long (etcd's Mutex does), and a holder would
// learn of its loss that late. Under contention
// from is nearly always in the past by the time the create reaches etcd.
// So watches are created at etcd's current revision instead (StartRevision
// 0, the fast path). The created answer carries a revision h such that
// every delete above h is delivered; if h >= from, the deletes in
// [from, h] were not watched, and the mux reads the key at revision h:
// gone, and the target is told at once; still there, and the watch, which
// sees every delete above h, covers the rest (its resume revision becomes
// h+1). The read is served at exactly revision h by whichever member
// answers (serializable: every member holds the same history, so that is
// the key's state at h, without the cost of a linearizable read); a member
// that has not applied h yet, or compacted it away, refuses, and the key
// is read linearizably instead, at a revision >= h. A watch created again
// on a new stream starts at its resume revision, which leaves no gap.
//
// Compaction. etcd cannot replay deletes older than its compaction
// revision: a watch whose resume revision is below it is dropped with a
// compaction notice. The key is then read (linearizably, at the current
// revision c) and, if the incarnation is still there, the watch is created
// again from c+1.

// watchBatch is how many keys one check Txn reads; etcd's default limit on
// operations per Txn is 128.
const watchBatch = 100

// gapCheck is a watch created at etcd's current revision at, which has to
// be told whether its incarnation was deleted in [w.from, at].
type gapCheck struct {
	w  *keyWatch
	at int64
}

// startChecksLocked starts the check goroutine unless it runs. Called with
// m.mu held, after queueing work.
func (m *mux) startChecksLocked() {
	if !m.checking {
		m.checking = m.spawn(m.check)
	}
}

// check runs the pending checks, a Txn of up to watchBatch reads at a time,
// gaps first (a waiter may be waiting on one), retrying with backoff until
// they succeed or the Backend is closed. It runs in a goroutine of its own
// while there is work, and at most one at a time.
func (m *mux) check() {
	var bo backoff
	for {
		gaps, compacted := m.takeChecks()
		var err error
		switch {
		case len(gaps) > 0:
			err = m.checkGaps(gaps)
		case len(compacted) > 0:
			err = m.checkCompacted(compacted)
		default:
			return
		}
		if err == nil {
			bo.reset()
			continue
		}
		m.mu.Lock()
		m.gaps = append(gaps, m.gaps...) // retried first
		m.compacted = append(compacted, m.compacted...)
		m.mu.Unlock()
		if !bo.wait(m.ctx) {
			m.mu.Lock()
			m.checking = false
			m.mu.Unlock()
			return
		}
	}
}

// takeChecks removes up to watchBatch gap checks, or if there are none up
// to watchBatch compacted watches, from the queues, skipping watches that
// were stopped meanwhile. When there is nothing left it marks the check
// goroutine as gone, in the same critical section, so that the next check
// starts one.
func (m *mux) takeChecks() ([]gapCheck, []*keyWatch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var gaps []gapCheck
	for len(m.gaps) > 0 && len(gaps) < watchBatch {
		g := m.gaps[0]
		m.gaps[0] = gapCheck{}
		m.gaps = m.gaps[1:]
		if g.w.state == watchLive {
			gaps = append(gaps, g)
		}
	}
	if len(gaps) > 0 {
		return gaps, nil
	}
	var compacted []*keyWatch
	for len(m.compacted) > 0 && len(compacted) < watchBatch {
		w := m.compacted[0]
		m.compacted[0] = nil
		m.compacted = m.compacted[1:]
		if w.state == watchChecking {
			compacted = append(compacted, w)
		}
	}
	if len(compacted) == 0 {
		m.gaps, m.compacted = nil, nil
		m.checking = false
	}
	return nil, compacted
}

// checkGaps reads the keys of gaps, each at its own revision, and settles
// them.
func (m *mux) checkGaps(gaps []gapCheck) error {
	ops := make([]clientv3.Op, len(gaps))
	for i, g := range gaps {
		ops[i] = g.w.checkOp(clientv3.WithSerializable(), clientv3.WithRev(g.at))
	}
	resp, err := m.read(ops)
	revs := func(i int) int64 { return gaps[i].at }
	if err != nil {
		if m.ctx.Err() != nil {
			return err
		}
		// A member behind revision at, or past it by compaction: read
		// the present instead, linearizably (at a revision >= every at).
		for i, g := range gaps {
			ops[i] = g.w.checkOp()
		}
		if resp, err = m.read(ops); err != nil {
			return err
		}
		revs = func(int) int64 { return resp.Header.GetRevision() }
	}
	m.mu.Lock()
	var ns []notice
	kick := false
	for i, g := range gaps {
		w := g.w
		if w.state != watchLive {
			continue // stopped, finished or compacted meanwhile
		}
		if n, gone := m.settleLocked(w, rangeKvs(resp, i), revs(i)); gone {
			ns = append(ns, n)
			kick = true // its cancel
		}
	}
	m.mu.Unlock()
	deliver(ns)
	if kick {
		m.kickFlush()
	}
	return nil
}

// checkCompacted reads the keys of compacted watches and settles them:
// the ones still there are created again.
func (m *mux) checkCompacted(batch []*keyWatch) error {
	ops := make([]clientv3.Op, len(batch))
	for i, w := range batch {
		ops[i] = w.checkOp()
	}
	resp, err := m.read(ops)
	if err != nil {
		return err
	}
	rev := resp.Header.GetRevision()
	m.mu.Lock()
	var ns []notice
	s := m.cur
	for i, w := range batch {
		if w.state != watchChecking {
			continue // stopped or failed meanwhile
		}
		if n, gone := m.settleLocked(w, rangeKvs(resp, i), rev); gone {
			ns = append(ns, n)
			continue
		}
		w.state = watchLive
		if s != nil {
			m.createLocked(s, w)
		} // else the next stream creates it
	}
	m.mu.Unlock()
	deliver(ns)
	if s != nil {
		m.kickFlush()
	}
	return nil
}

// checkOp is the read that settles w (with opts, for its revision): its
// key, or for a watch of older claims those claims (watchrange.go).
func (w *keyWatch) checkOp(opts ...clientv3.OpOption) clientv3.Op {
	if w.older != 0 {
		return olderOp(w.key, w.older, opts...)
	}
	return clientv3.OpGet(w.key, append(opts, clientv3.WithKeysOnly())...)
}

// settleLocked applies a read of w's key at revision rev (its checkOp):
// it finishes w if its incarnation is gone, or for a watch of older
// claims if fewer than need are left, and otherwise moves its resume
// revision past rev. Called with m.mu held.
func (m *mux) settleLocked(w *keyWatch, kvs []*mvccpb.KeyValue, rev int64) (notice, bool) {
	if w.older != 0 {
		if len(kvs) < w.need {
			return m.finishLocked(w, rev, nil), true
		}
		w.from = max(w.from, rev+1)
		return notice{}, false
	}
	if len(kvs) == 0 || kvs[0].CreateRevision >= w.from || (w.puts && kvs[0].ModRevision >= w.from) {
		return m.finishLocked(w, rev, nil), true
	}
	w.from = max(w.from, rev+1)
	return notice{}, false
}

// read runs one Txn of reads, bounded by cleanupTimeout.
func (m *mux) read(ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	ctx, cancel := context.WithTimeout(m.ctx, cleanupTimeout)
	defer cancel()
	return m.kv.Txn(ctx).Then(ops...).Commit()
}
