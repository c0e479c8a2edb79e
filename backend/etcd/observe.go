package etcd

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

var _ backend.Observer = (*Backend)(nil)

// Observation of a key's holders (backend.Observer).
//
// An Observe reads the key's queue directory once, at some revision R, and
// then follows it with a range watch from R+1 (watchrange.go), on the
// Backend's one watch stream: N observations cost N watches there and no
// stream of their own. It applies each event to its own copy of the queue
// and computes the holders with queueState, Inspect's rule, one revision
// at a time (a multi-key Txn or a lease's end changes several claims in
// one revision, and that is one change). The mux resumes the watch from
// the last revision delivered whenever the stream is opened again (it
// failed, or its etcd member lost its leader), so no event is skipped or
// applied twice. Only when etcd has compacted that revision away is the
// directory read again, once: changes inside the compacted gap are then
// missed, but none is seen out of order.
//
// The mux calls the observation from its receive goroutine, which must
// never wait for a consumer: what it reports is queued in the inbox, and
// the Observe goroutine applies it and yields. The inbox is unbounded, as
// clientv3's own watch buffers are; a consumer slower than the key's
// changes costs memory, not missed states. The client package (ashlock)
// runs one Observe per client and election, however many observers the
// election has there.

// observation is one running Observe: the key's queue as of rev.
type observation struct {
	b      *Backend
	key    string
	dir    string
	rev    int64              // the last revision applied
	claims []*mvccpb.KeyValue // the queue directory as of rev, by create revision
	last   backend.LockInfo   // the last state yielded
	yield  func(backend.LockInfo, error) bool
}

// inbox is the target of one range watch of an observation: what the
// watch reported, in order, not yet applied. Each watch has its own, so
// that what a stopped watch still reports is never taken for the next's.
type inbox struct {
	mu   sync.Mutex
	news []watchNews
	wake chan struct{} // cap 1: news is not empty
}

// Observe implements backend.Observer. It costs one read of the key's
// queue directory, then one watch of it on the Backend's shared stream;
// see above for how interruptions are recovered from. Failures to reach
// etcd are retried with backoff and never yielded. The sequence ends when
// ctx ends; it yields an error wrapping backend.ErrClosed once when the
// Backend is closed, one wrapping backend.ErrUnavailable when the etcd
// client is, one wrapping backend.ErrUnavailable when etcd denies the
// credentials in use access to the key (permission denied), and one
// wrapping ErrBadRecord if a claim's value was not written by this
// package.
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
		defer context.AfterFunc(b.ctx, cancel)()
		o := &observation{b: b, key: key, dir: b.layout.dir(key), yield: yield}
		err := o.run(octx)
		switch {
		case errors.Is(err, errStopped) || ctx.Err() != nil:
		case b.ctx.Err() != nil:
			yield(backend.LockInfo{}, closedError("observe"))
		case b.cli.Ctx().Err() != nil:
			yield(backend.LockInfo{}, fmt.Errorf("%w: etcd observe %q: the etcd client was closed", backend.ErrUnavailable, key))
		case err != nil:
			yield(backend.LockInfo{}, err)
		}
	}
}

// forbidden reports an error that waiting will not cure: etcd denies the
// credentials in use access to the prefix. Observe yields it and ends
// instead of retrying, as Acquire and Inspect fail with it at once.
func forbidden(err error) bool { return errors.Is(err, rpctypes.ErrPermissionDenied) }

// errStopped: the consumer stopped the iteration.
var errStopped = errors.New("etcd observe: stopped")

// run reads and watches until ctx ends, the consumer stops (errStopped)
// or something fails for good.
func (o *observation) run(ctx context.Context) error {
	if err := o.resync(ctx, true); err != nil {
		return err
	}
	var bo backend.Backoff
	for {
		in := &inbox{wake: make(chan struct{}, 1)}
		w := newRangeWatch(o.dir, o.rev+1, in)
		o.b.reg.mux.start(w)
		progress, news, err := o.follow(ctx, in)
		o.b.reg.mux.stop(w)
		if err != nil || ctx.Err() != nil {
			return err
		}
		if progress {
			bo.Reset()
		}
		switch {
		case news.compacted:
			if err := o.resync(ctx, false); err != nil {
				return err
			}
		case o.b.cli.Ctx().Err() != nil, forbidden(news.err):
			return news.err
		case !bo.Wait(ctx.Done()):
			// etcd refused the watch: try again from o.rev+1 after a pause.
			return nil
		}
	}
}

// resync replaces the copy of the queue with one read of it, retried with
// backoff until it succeeds, and yields the state if it is the first or
// differs from the last one yielded. It fails only once ctx has ended, the
// etcd client is closed, when etcd refuses it for good (see forbidden), or
// on a bad record or the consumer's stop.
func (o *observation) resync(ctx context.Context, first bool) error {
	var bo backend.Backoff
	for {
		resp, err := o.b.cli.Get(ctx, o.dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err == nil {
			o.claims, o.rev = resp.Kvs, resp.Header.Revision
			return o.emit(first)
		}
		if ctx.Err() != nil || o.b.cli.Ctx().Err() != nil || forbidden(err) || !bo.Wait(ctx.Done()) {
			return rpcError(ctx, "observe", err)
		}
	}
}

// follow applies what the watch reports to in until it ends: ctx ends, the
// consumer stops or a record is bad (err), or the watch ends by itself
// (news, compacted or failed). It reports whether any revision was
// applied. Each revision's events are applied whole, yielding the state
// after each revision whose holders differ from the last one yielded.
func (o *observation) follow(ctx context.Context, in *inbox) (progress bool, news watchNews, err error) {
	for {
		select {
		case <-ctx.Done():
			return progress, watchNews{}, nil
		case <-in.wake:
		}
		in.mu.Lock()
		all := in.news
		in.news = nil
		in.mu.Unlock()
		for _, n := range all {
			if n.compacted || n.err != nil {
				return progress, n, nil
			}
			for k, ev := range n.evs {
				// The mux passes on no event below the watch's start
				// (o.rev+1), so none is applied twice.
				rev := ev.Kv.ModRevision
				o.claims = slices.DeleteFunc(o.claims, func(kv *mvccpb.KeyValue) bool { return bytes.Equal(kv.Key, ev.Kv.Key) })
				if ev.Type == mvccpb.PUT {
					i, _ := slices.BinarySearchFunc(o.claims, ev.Kv.CreateRevision, byCreateRevision)
					o.claims = slices.Insert(o.claims, i, ev.Kv)
				}
				// One revision's events are one change: state only after
				// the last of them.
				if k+1 < len(n.evs) && n.evs[k+1].Kv.ModRevision == rev {
					continue
				}
				o.rev, progress = rev, true
				if err := o.emit(false); err != nil {
					return progress, watchNews{}, err
				}
			}
		}
	}
}

// notify implements watchTarget: it queues news of the watch for the
// Observe goroutine. It never blocks: it is called by the mux's receive
// goroutine.
func (in *inbox) notify(n watchNews) {
	in.mu.Lock()
	in.news = append(in.news, n)
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default: // a wake is pending
	}
}

// emit yields the state of the copy, holders only (queueState, Inspect's
// rule), if always is set or its holders differ from the last state
// yielded.
func (o *observation) emit(always bool) error {
	info, err := queueState("observe", o.key, o.claims, false)
	if err != nil {
		return err
	}
	if !always && backend.SameHolders(o.last, info) {
		return nil
	}
	o.last = info
	if !o.yield(info, nil) {
		return errStopped
	}
	return nil
}

func byCreateRevision(kv *mvccpb.KeyValue, rev int64) int { return cmp.Compare(kv.CreateRevision, rev) }
