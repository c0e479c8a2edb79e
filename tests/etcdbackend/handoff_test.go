package etcdbackend_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// A chain of fair waiters on one key is handed the key in order, without
// etcd's catch-up delay. Each waiter watches the claim just ahead of it,
// and such a watch, started from the past revision at which the waiter read
// that claim, would be caught up by etcd only every 100ms. The Backend
// starts every watch at etcd's current revision instead (StartRevision 0)
// and closes the gap with a read (see backend/etcd/watchcheck.go); the test checks that
// on the wire rather than timing the handoffs.
//
// Structurally too: every watch the Backend makes covers one key, and all
// of them share one watch stream.
func TestHandoffChainIsPrompt(t *testing.T) {
	const waiters = 8
	prefix := uniquePrefix(t)
	var wc watchCounter
	b, _ := newBackend(t, shared, prefix, wc.configure)
	operator := shared.Client(t)
	l := grant(t, b, 30*time.Second)

	holder := acquire(t, b, request("k", l, "H"))
	ctx := testCtx(t, waitBound)
	type handoff struct {
		at    time.Time
		token uint64
		err   error
	}
	done := make([]chan handoff, waiters)
	for i := range done {
		done[i] = make(chan handoff, 1)
		req := request("k", l, "W")
		go func() {
			c, err := b.Acquire(ctx, req)
			at := time.Now()
			if err == nil {
				err = b.Release(ctx, c) // hand the key on at once
			}
			done[i] <- handoff{at, c.Token, err}
		}()
		// Queue the waiters one by one, so the order is known.
		awaitCount(t, operator, prefix, int64(i+2))
	}

	start := time.Now()
	if err := b.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	prev := holder.Token
	for i, ch := range done {
		var h handoff
		select {
		case h = <-ch:
		case <-time.After(waitBound):
			t.Fatalf("waiter %d not handed the key within %v", i, waitBound)
		}
		if h.err != nil {
			t.Fatalf("waiter %d: %v", i, h.err)
		}
		if h.token <= prev {
			t.Fatalf("waiter %d got token %d after %d: not in queue order", i, h.token, prev)
		}
		prev = h.token
		t.Logf("waiter %d holds after %v", i, h.at.Sub(start))
	}
	if n := wc.past.Load(); n != 0 {
		t.Errorf("%d watches created at a past revision, which etcd catches up only every 100ms; want all at its current one", n)
	}
	if n := wc.ranged.Load(); n != 0 {
		t.Errorf("%d range watches created; want single-key watches only", n)
	}
	// Each waiter watched the claim ahead of it. Its own claim, waiting
	// less than a second and held for less than 5ms, needs no watch.
	if n := wc.single.Load(); n < waiters {
		t.Errorf("%d single-key watches created, want at least %d", n, waiters)
	}
	if n := wc.streams.Load(); n != 1 {
		t.Errorf("%d watch streams opened, want 1 shared by every watch", n)
	}
}

// watchCounter counts, through gRPC interceptors on one client, the watch
// streams it opens, the watches it creates on them (by whether they cover
// one key or a range, and whether they start in the past), the watch
// responses that carry events, and the unary requests it sends.
type watchCounter struct {
	streams, single, ranged, events, unary atomic.Int64
	past                                   atomic.Int64 // creates with a StartRevision: served from the past
	// watchReads counts the unary requests that are the backend's reads
	// for its watches (a Txn of reads only, no compare), which close the
	// start gap of a watch. They are counted in unary too.
	watchReads atomic.Int64
}

// checks is the number of unary requests other than watch reads: the
// writes and the compare-and-read Txns that the lock protocol sends.
// Counts of a protocol step are taken on it: the read that starts a
// claim's loss watch comes once per claim, when the claim has been held
// for a few milliseconds or has waited for a second, which a slow run
// reaches inside any window, so it says nothing about the step.
func (w *watchCounter) checks() int64 { return w.unary.Load() - w.watchReads.Load() }

// isWatchRead reports whether req is a Txn of reads only, with no compare:
// the shape of the backend's reads for its watches.
func isWatchRead(req any) bool {
	txn, ok := req.(*pb.TxnRequest)
	if !ok || len(txn.Compare) != 0 || len(txn.Failure) != 0 || len(txn.Success) == 0 {
		return false
	}
	for _, op := range txn.Success {
		if op.GetRequestRange() == nil {
			return false
		}
	}
	return true
}

// configure installs the interceptors; pass it to Cluster.Client.
func (w *watchCounter) configure(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions,
		grpc.WithChainStreamInterceptor(w.intercept),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
			cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			w.unary.Add(1)
			if isWatchRead(req) {
				w.watchReads.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

func (w *watchCounter) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
	method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != watchMethod {
		return s, err
	}
	w.streams.Add(1)
	return &createHook{ClientStream: s, onCreate: w.created, onResponse: w.received}, nil
}

func (w *watchCounter) created(cr *pb.WatchCreateRequest) {
	if cr.StartRevision != 0 {
		w.past.Add(1)
	}
	if len(cr.RangeEnd) == 0 {
		w.single.Add(1)
	} else {
		w.ranged.Add(1)
	}
}

func (w *watchCounter) received(resp *pb.WatchResponse) {
	if len(resp.Events) > 0 {
		w.events.Add(1)
	}
}
