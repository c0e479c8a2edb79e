package etcd

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The loss watch.
//
// A held claim can vanish without Release: its lease expires or is revoked
// (etcd deletes every key bound to it), or an operator deletes it. The
// holder must learn that promptly (guarantee 4), but a goroutine and a watch
// per held claim would make 10,000 held locks expensive. Instead each
// Backend runs ONE watch over its whole claims namespace that delivers
// deletes only (WithFilterPut), and hands each delete to the registry,
// which knows the handful of keys that belong to this Backend.
//
// The trade-off: the watch carries every delete under the prefix,
// including those of other clients' claims, and the registry drops the ones
// it does not own. A delete is one small event per released claim, far
// cheaper than a watch per claim, but a client sharing its prefix with a
// very busy one pays for the other's traffic.
//
// Gaps. A watch that is resumed from the revision after the last one it
// delivered misses nothing. Two situations open a gap:
//   - the first watch, and any watch started after the resume revision was
//     compacted, begins at "now", after claims were possibly registered;
//   - compaction itself cancels a lagging watch.
// In both cases, once the new watch is confirmed (its created notification
// carries the revision it starts after), the watcher reads every registered
// claim key and reports the ones that are absent. An entry registered after
// that read belongs to an Acquire that had not yet created its claim, so
// the claim and its delete both come after the watch's start and reach it.

// watchBatch is how many claim keys one recheck Txn reads; etcd's default
// limit on operations per Txn is 128.
const watchBatch = 100

// Backoff between watch restarts after an error.
const (
	minWatchBackoff = 50 * time.Millisecond
	maxWatchBackoff = 2 * time.Second
)

// watchLoop runs the loss watch until ctx ends. It runs in its own
// goroutine for the Backend's lifetime.
func (b *Backend) watchLoop(ctx context.Context) {
	var last int64 // every delete at revision <= last has been delivered; 0: unknown
	backoff := minWatchBackoff
	for ctx.Err() == nil {
		var healthy bool
		last, healthy = b.watchOnce(ctx, last)
		if healthy {
			backoff = minWatchBackoff
		}
		if b.cli.Ctx().Err() != nil {
			return // the caller closed the client; nothing more to watch
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxWatchBackoff)
	}
}

// watchOnce runs one watch from last+1 (or from now when last is 0) until
// it fails. It returns the new resume point (0 after a compaction) and
// whether the watch was established at all.
func (b *Backend) watchOnce(ctx context.Context, last int64) (int64, bool) {
	// WithRequireLeader: a member cut off from the cluster would otherwise
	// keep the watch open and silently deliver nothing.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	fresh := last == 0
	opts := []clientv3.OpOption{
		clientv3.WithPrefix(),
		clientv3.WithFilterPut(),
		clientv3.WithCreatedNotify(),
		clientv3.WithProgressNotify(),
	}
	if !fresh {
		opts = append(opts, clientv3.WithRev(last+1))
	}
	established := false
	// However the watch ends, deletes after last may now go unseen until
	// a new one is established: wake every predecessor wait so that its
	// waiter looks again (see predwait.go).
	defer b.reg.watchStopped()
	for wr := range b.cli.Watch(wctx, b.layout.claimsRoot(), opts...) {
		if wr.CompactRevision != 0 {
			// Deletes between last and the compaction point are lost
			// for good: start afresh and recheck every claim.
			return 0, established
		}
		if wr.Canceled {
			return last, established
		}
		if wr.Created {
			established = true
			if fresh {
				last = wr.Header.GetRevision()
				if !b.recheck(ctx) {
					return 0, established
				}
			}
			// From here on every delete after last reaches this loop,
			// so predecessor waits may rely on it. A fresh watch is
			// marked so only after its recheck: nothing is dispatched
			// before, and a wait meanwhile is better off watching by
			// itself than stalling behind a recheck that may retry.
			b.reg.watchEstablished(last)
			continue
		}
		dels := make([]deleted, 0, len(wr.Events))
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				dels = append(dels, deleted{key: string(ev.Kv.Key), rev: ev.Kv.ModRevision})
				last = max(last, ev.Kv.ModRevision)
			}
		}
		// Only a progress notification's header revision says that every
		// delete up to it was delivered; an event response's header may
		// be ahead of its events (etcd sends a catching-up watcher its
		// events in batches, each with the store's current revision).
		var progress int64
		if wr.IsProgressNotify() {
			progress = wr.Header.GetRevision()
			last = max(last, progress)
		}
		for _, fn := range b.reg.observeDeletes(dels, progress) {
			fn()
		}
	}
	return last, established
}

// recheck reads every registered claim key and reports the absent ones to
// the registry. It retries until it succeeds or ctx ends, and reports
// whether it succeeded.
func (b *Backend) recheck(ctx context.Context) bool {
	backoff := minWatchBackoff
	for {
		err := b.recheckOnce(ctx)
		if err == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxWatchBackoff)
	}
}

func (b *Backend) recheckOnce(ctx context.Context) error {
	snap := b.reg.snapshot()
	keys := make([]string, 0, len(snap))
	for k := range snap {
		keys = append(keys, k)
	}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), watchBatch)]
		keys = keys[len(batch):]
		ops := make([]clientv3.Op, len(batch))
		for i, k := range batch {
			ops[i] = clientv3.OpGet(k, clientv3.WithKeysOnly())
		}
		rctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		resp, err := b.cli.Txn(rctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return err
		}
		rev := resp.Header.GetRevision()
		var due []func()
		for i, k := range batch {
			kvs := resp.Responses[i].GetResponseRange().GetKvs()
			if at, ok := recheckAbsent(kvs, rev, snap[k]); ok {
				if fn := b.reg.observeAbsent(k, at); fn != nil {
					due = append(due, fn)
				}
			}
		}
		for _, fn := range due {
			fn()
		}
	}
	return nil
}

// recheckAbsent reads the result of a recheck of one claim key, read at
// revision rev while the registry had token for it (0 if not yet known),
// and returns a revision at which the key did not exist, if the read shows
// one. The registry decides whether that concerns the claim registered now.
//
// A missing key was absent at rev. A key that exists with another create
// revision than token no longer holds the snapshotted claim, but it was not
// absent at rev: claim names are reused (see names.go), and since the
// snapshot the name may have been lent to a new acquisition whose claim is
// the one read. What the read does prove is that the key was absent just
// before its current incarnation was created, which is after the
// snapshotted claim was created. With the token still unknown, an existing
// key is the claim being created.
func recheckAbsent(kvs []*mvccpb.KeyValue, rev, token int64) (int64, bool) {
	switch {
	case len(kvs) == 0:
		return rev, true
	case token != 0 && kvs[0].CreateRevision != token:
		return kvs[0].CreateRevision - 1, true
	}
	return 0, false
}
