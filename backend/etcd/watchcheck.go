package etcd

import (
	"cmp"
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
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

// check is a pending read of w's key: at its gap's end at, for a watch
// created at etcd's current revision at, which has to be told whether its
// incarnation was deleted in [w.from, at]; or, with at 0, at the current
// revision, for a watch in watchChecking (compacted).
type check struct {
	w  *keyWatch
	at int64
}

// wanted reports whether c still applies: its watch was not stopped,
// finished or (for a gap) compacted meanwhile.
func (c check) wanted() bool {
	return c.at == 0 && c.w.state == watchChecking || c.at != 0 && c.w.state == watchLive
}

// startChecksLocked queues c and starts the check goroutine unless it
// runs. Called with m.mu held.
func (m *mux) startChecksLocked(c check) {
	m.checks = append(m.checks, c)
	if !m.checking {
		m.checking = m.spawn(m.check)
	}
}

// check runs the pending checks, a Txn of up to watchBatch reads at a
// time, retrying with backoff until they succeed or the Backend is
// closed. It runs in a goroutine of its own while there is work, and at
// most one at a time.
func (m *mux) check() {
	var bo backend.Backoff
	for {
		batch := m.takeChecks()
		if len(batch) == 0 {
			return
		}
		if m.checkBatch(batch) == nil {
			bo.Reset()
			continue
		}
		m.mu.Lock()
		m.checks = append(batch, m.checks...) // retried first
		m.mu.Unlock()
		if !bo.Wait(m.ctx.Done()) {
			return // closed: Close stops spawn before it ends m.ctx, so no check starts again
		}
	}
}

// takeChecks removes up to watchBatch checks that still apply from the
// queue. When there is nothing left it marks the check goroutine as gone,
// in the same critical section, so that the next check starts one.
func (m *mux) takeChecks() []check {
	m.mu.Lock()
	defer m.mu.Unlock()
	var batch []check
	for len(m.checks) > 0 && len(batch) < watchBatch {
		c := m.checks[0]
		m.checks[0] = check{}
		m.checks = m.checks[1:]
		if c.wanted() {
			batch = append(batch, c)
		}
	}
	if len(batch) == 0 {
		m.checks = nil
		m.checking = false
	}
	return batch
}

// checkBatch reads the keys of batch, each gap at its own revision, and
// settles them: the compacted watches still there are created again.
func (m *mux) checkBatch(batch []check) error {
	ops := make([]clientv3.Op, len(batch))
	for i, c := range batch {
		ops[i] = c.w.checkOp()
		if c.at != 0 {
			ops[i] = c.w.checkOp(clientv3.WithSerializable(), clientv3.WithRev(c.at))
		}
	}
	resp, err := m.read(ops)
	revs := func(i int) int64 { return cmp.Or(batch[i].at, resp.Header.GetRevision()) }
	if err != nil {
		if m.ctx.Err() != nil {
			return err
		}
		// A member behind a revision at, or past it by compaction: read
		// the present instead, linearizably (at a revision >= every at).
		for i, c := range batch {
			ops[i] = c.w.checkOp()
		}
		if resp, err = m.read(ops); err != nil {
			return err
		}
		revs = func(int) int64 { return resp.Header.GetRevision() }
	}
	m.mu.Lock()
	var ns []notice
	kick := false
	for i, c := range batch {
		if !c.wanted() {
			continue
		}
		switch n := m.settleLocked(c.w, rangeKvs(resp, i), revs(i)); {
		case n != nil:
			ns = append(ns, n)
			kick = true // its cancel
		case c.at == 0:
			c.w.state = watchLive
			if m.cur != nil {
				m.createLocked(m.cur, c.w)
				kick = true
			} // else the next stream creates it
		}
	}
	m.mu.Unlock()
	deliver(ns)
	if kick {
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
// revision past rev; it returns the notice of a finished watch, else nil.
// Called with m.mu held.
func (m *mux) settleLocked(w *keyWatch, kvs []*mvccpb.KeyValue, rev int64) notice {
	gone := len(kvs) == 0 || kvs[0].CreateRevision >= w.from || (w.puts && kvs[0].ModRevision >= w.from)
	if w.older != 0 {
		gone = len(kvs) < w.need
	}
	if gone {
		return m.finishLocked(w, rev, nil)
	}
	w.from = max(w.from, rev+1)
	return nil
}

// read runs one Txn of reads, bounded by cleanupTimeout.
func (m *mux) read(ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	ctx, cancel := context.WithTimeout(m.ctx, cleanupTimeout)
	defer cancel()
	return m.kv.Txn(ctx).Then(ops...).Commit()
}
