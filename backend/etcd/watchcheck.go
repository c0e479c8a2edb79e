package etcd

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Checks of compacted watches.
//
// etcd cannot replay deletes older than its compaction revision: a watch
// whose resume revision is below it is dropped with a compaction notice.
// Whether the delete it waited for happened is then decided from the
// present: a Get of the key. The watched incarnation is the one that
// existed at revision from-1; if the key is absent, or exists with a create
// revision >= from (another incarnation, created after ours was deleted),
// ours is gone and the target is told so. Otherwise the key has existed
// without interruption since before from-1 (a deleted incarnation never
// comes back: a new one gets a new create revision), so it is still ours,
// and the watch is created again from the Get's revision + 1: nothing
// after that revision has been missed.

// watchBatch is how many keys one check Txn reads; etcd's default limit on
// operations per Txn is 128.
const watchBatch = 100

// check runs the pending checks, a Txn of up to watchBatch Gets at a time,
// retrying with backoff until they succeed or the Backend is closed. It runs
// in a goroutine of its own while there is work, and at most one at a time.
func (m *mux) check() {
	backoff := minWatchBackoff
	for {
		batch := m.takeChecks()
		if len(batch) == 0 {
			return
		}
		resp, err := m.readKeys(batch)
		if err != nil {
			m.mu.Lock()
			m.checks = append(batch, m.checks...) // retried first
			m.mu.Unlock()
			select {
			case <-m.ctx.Done():
				m.mu.Lock()
				m.checking = false
				m.mu.Unlock()
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxWatchBackoff)
			continue
		}
		backoff = minWatchBackoff
		m.applyChecks(batch, resp)
	}
}

// takeChecks removes up to watchBatch watches still waiting for their check
// from the queue. When there are none it marks the check goroutine as gone,
// in the same critical section, so that the next compaction starts one.
func (m *mux) takeChecks() []*keyWatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	var batch []*keyWatch
	for len(m.checks) > 0 && len(batch) < watchBatch {
		w := m.checks[0]
		m.checks[0] = nil
		m.checks = m.checks[1:]
		if w.state == watchChecking {
			batch = append(batch, w)
		}
	}
	if len(batch) == 0 {
		m.checks = nil
		m.checking = false
	}
	return batch
}

func (m *mux) readKeys(batch []*keyWatch) (*clientv3.TxnResponse, error) {
	ops := make([]clientv3.Op, len(batch))
	for i, w := range batch {
		ops[i] = clientv3.OpGet(w.key, clientv3.WithKeysOnly())
	}
	ctx, cancel := context.WithTimeout(m.ctx, cleanupTimeout)
	defer cancel()
	return m.kv.Txn(ctx).Then(ops...).Commit()
}

// applyChecks finishes the watches whose incarnation is gone and creates
// the others again.
func (m *mux) applyChecks(batch []*keyWatch, resp *clientv3.TxnResponse) {
	rev := resp.Header.GetRevision()
	m.mu.Lock()
	var ns []notice
	s := m.cur
	for i, w := range batch {
		if w.state != watchChecking {
			continue // stopped or failed meanwhile
		}
		var kvs []*mvccpb.KeyValue
		if i < len(resp.Responses) {
			kvs = resp.Responses[i].GetResponseRange().GetKvs()
		}
		if len(kvs) == 0 || kvs[0].CreateRevision >= w.from {
			ns = append(ns, m.finishLocked(w, rev, nil))
			continue
		}
		w.from = max(w.from, rev+1)
		w.state = watchLive
		if s != nil {
			m.createLocked(s, w)
		}
		// Otherwise the next stream creates it.
	}
	m.mu.Unlock()
	deliver(ns)
	if s != nil {
		m.kickFlush()
	}
}
