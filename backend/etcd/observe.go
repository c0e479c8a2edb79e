package etcd

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

var _ backend.Observer = (*Backend)(nil)

// Observation of a key's holders (backend.Observer).
//
// An Observe reads the key's queue directory once, at some revision R, and
// then watches the directory from R+1, applying each event to its own copy
// of the queue and computing the holders by the rule Inspect follows, one
// revision at a time (a multi-key Txn or a lease's end changes several
// claims in one revision, and that is one change). It remembers the last
// revision applied; whenever the watch ends without the caller having
// asked (the stream failed and clientv3 gave up, the etcd member lost its
// leader - the watch carries WithRequireLeader so that a member cut off
// from the cluster ends it instead of going silent), the directory is
// watched again from that revision + 1, so no event is skipped or applied
// twice. Only when etcd has compacted that revision away is the directory
// read again, once: changes inside the compacted gap are then missed, but
// none is seen out of order.
//
// The watch is clientv3's: the mux of watch.go serves single-key watches
// that end at their first event, and a directory watch that streams every
// event does not fit it. clientv3 multiplexes every watch made with the
// same context metadata on one gRPC stream per client, so a Backend's
// observations still share one stream (a second one beside the mux's),
// and clientv3 itself resumes them from their last revision when that
// stream is reopened. The client package (ashlock) runs one Observe per
// client and election, however many observers the election has there.

// observation is one running Observe: the key's queue as of rev.
type observation struct {
	b      *Backend
	key    string
	dir    string
	rev    int64                       // the last revision applied
	claims map[string]*mvccpb.KeyValue // the queue directory as of rev, by etcd key
	last   backend.LockInfo            // the last state yielded
	yield  func(backend.LockInfo, error) bool
	sorted []*mvccpb.KeyValue // scratch for state
}

// Observe implements backend.Observer. It costs one read of the key's
// queue directory, then one watch of it; see above for how interruptions
// are recovered from. Failures to reach etcd are retried with backoff and
// never yielded. The sequence ends when ctx ends; it yields an error
// wrapping backend.ErrClosed once when the Backend is closed, one wrapping
// backend.ErrUnavailable when the etcd client is, and one wrapping
// ErrBadRecord if a claim's value was not written by this package.
func (b *Backend) Observe(ctx context.Context, key string) iter.Seq2[backend.LockInfo, error] {
	return func(yield func(backend.LockInfo, error) bool) {
		if err := b.closed("observe"); err != nil {
			yield(backend.LockInfo{}, err)
			return
		}
		// Closing the Backend ends the observation like ctx's end does;
		// the cause tells the two apart below.
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(b.ctx, cancel)
		defer stop()
		o := &observation{b: b, key: key, dir: b.layout.dir(key), yield: yield}
		err := o.run(octx)
		switch {
		case errors.Is(err, errStopped) || ctx.Err() != nil:
		case b.ctx.Err() != nil:
			yield(backend.LockInfo{}, closedError("observe"))
		case err != nil:
			yield(backend.LockInfo{}, err)
		}
	}
}

// errStopped: the consumer stopped the iteration.
var errStopped = errors.New("etcd observe: stopped")

// run reads and watches until ctx ends (nil), the consumer stops
// (errStopped) or something fails for good.
func (o *observation) run(ctx context.Context) error {
	backoff := minBackoff
	read := true
	first := true
	for {
		if read {
			if err := o.read(ctx, first); err != nil {
				if ctx.Err() != nil || errors.Is(err, errStopped) || o.b.cli.Ctx().Err() != nil {
					return o.fatal(ctx, err)
				}
				if !sleep(ctx, backoff) {
					return nil
				}
				backoff = min(2*backoff, maxBackoff)
				continue
			}
			read, first = false, false
		}
		progress, compacted, err := o.watch(ctx)
		if err != nil || ctx.Err() != nil || o.b.cli.Ctx().Err() != nil {
			return o.fatal(ctx, err)
		}
		read = compacted
		if progress {
			backoff = minBackoff
		}
		if !compacted {
			// The watch ended by itself (leader lost, stream given
			// up): watch again from o.rev+1 after a pause.
			if !sleep(ctx, backoff) {
				return nil
			}
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

// fatal returns what run returns for err: nil once ctx has ended,
// errStopped or a bad record as they are, and for a closed etcd client an
// error wrapping ErrUnavailable.
func (o *observation) fatal(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, errStopped):
		return err
	case ctx.Err() != nil:
		return nil
	case o.b.cli.Ctx().Err() != nil:
		return fmt.Errorf("%w: etcd observe %q: the etcd client was closed", backend.ErrUnavailable, o.key)
	}
	return err
}

// read replaces the copy of the queue with one read of it, and yields the
// state if it is the first or differs from the last one yielded.
func (o *observation) read(ctx context.Context, first bool) error {
	resp, err := o.b.cli.Get(ctx, o.dir, clientv3.WithPrefix())
	if err != nil {
		return rpcError(ctx, "observe", err)
	}
	o.claims = make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		o.claims[string(kv.Key)] = kv
	}
	o.rev = resp.Header.Revision
	return o.emit(first)
}

// watch watches the directory from o.rev+1 and applies what it hears,
// until the watch ends. It reports whether any event was applied, whether
// the watch ended because o.rev+1 was compacted, and an error that ends
// the observation (a bad record, errStopped).
func (o *observation) watch(ctx context.Context) (progress, compacted bool, err error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := o.b.cli.Watch(wctx, o.dir, clientv3.WithPrefix(), clientv3.WithRev(o.rev+1))
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return progress, true, nil
		}
		if resp.Err() != nil {
			return progress, false, nil
		}
		evs := resp.Events
		for i, ev := range evs {
			rev := ev.Kv.ModRevision
			if rev <= o.rev {
				continue // cannot happen from o.rev+1 on; never apply twice
			}
			switch ev.Type {
			case mvccpb.PUT:
				o.claims[string(ev.Kv.Key)] = ev.Kv
			case mvccpb.DELETE:
				delete(o.claims, string(ev.Kv.Key))
			}
			// One revision's events are one change: state only after
			// the last of them.
			if i+1 < len(evs) && evs[i+1].Kv.ModRevision == rev {
				continue
			}
			o.rev = rev
			progress = true
			if err := o.emit(false); err != nil {
				return progress, false, err
			}
		}
	}
	return progress, false, nil
}

// emit yields the state of the copy if always is set or its holders
// differ from the last state yielded.
func (o *observation) emit(always bool) error {
	info, err := o.state()
	if err != nil {
		return err
	}
	if !always && sameHolders(o.last, info) {
		return nil
	}
	o.last = info
	if !o.yield(info, nil) {
		return errStopped
	}
	return nil
}

// state computes the LockInfo of the copy by Inspect's rule, holders only.
func (o *observation) state() (backend.LockInfo, error) {
	o.sorted = o.sorted[:0]
	for _, kv := range o.claims {
		o.sorted = append(o.sorted, kv)
	}
	slices.SortFunc(o.sorted, func(a, b *mvccpb.KeyValue) int {
		return cmp.Compare(a.CreateRevision, b.CreateRevision)
	})
	info := backend.LockInfo{Key: o.key}
	nonShared := false
	for i, kv := range o.sorted {
		rec, err := decodeClaim(kv.Value)
		if err != nil {
			return backend.LockInfo{}, fmt.Errorf("etcd observe %q: claim %s: %w", o.key, kv.Key, err)
		}
		k := kindOfName(string(kv.Key))
		if i == 0 {
			info.Permits = k.n
		}
		var holds bool
		switch {
		case k.shared:
			holds = !nonShared
		case k.counted():
			holds = i < k.n && rec.Permit != noPermit
		default:
			holds = i == 0
		}
		nonShared = nonShared || !k.shared
		if holds {
			info.Holders = append(info.Holders, backend.Holder{
				Owner: rec.Owner, Token: uint64(kv.CreateRevision), Permit: max(rec.Permit, 0), Shared: k.shared,
				Value: rec.Value, AcquiredAt: rec.AcquiredAt, Stamp: rec.Stamp,
			})
		}
	}
	if len(info.Holders) > 0 {
		h := info.Holders[0]
		info.Held, info.Owner, info.Token, info.AcquiredAt, info.Stamp = true, h.Owner, h.Token, h.AcquiredAt, h.Stamp
	}
	return info, nil
}

// sameHolders reports whether a and b have the same holders with the same
// values.
func sameHolders(a, b backend.LockInfo) bool {
	if len(a.Holders) != len(b.Holders) {
		return false
	}
	for i, h := range a.Holders {
		g := b.Holders[i]
		if h.Token != g.Token || h.Owner != g.Owner || h.Permit != g.Permit || h.Shared != g.Shared ||
			!bytes.Equal(h.Value, g.Value) {
			return false
		}
	}
	return true
}
