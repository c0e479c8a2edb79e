package etcdbackend_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
)

// A waiter's watch covers the claim just ahead of it and nothing else:
// deletes of other keys' claims, of a key whose name extends the waited
// key's, and of the claim queued behind it, send it nothing. Only the
// delete of the claim ahead reaches it.
func TestWaiterWokenByPredecessorOnly(t *testing.T) {
	prefix := uniquePrefix(t)
	hb, _ := newBackend(t, shared, prefix)
	var wc watchCounter
	wb, _ := newBackend(t, shared, prefix, wc.configure)
	operator := shared.Client(t)
	hl := grant(t, hb, 30*time.Second)

	holder := acquire(t, hb, request("k", hl, "H"))
	var others []backend.Claim
	for _, k := range []string{"k2", "k/", "j", "k/x"} {
		others = append(others, acquire(t, hb, request(k, hl, "O")))
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	w := start(ctx, wb, request("k", grant(t, wb, 30*time.Second), "W"))
	awaitCount(t, operator, prefix+"claims/", 6)
	// A claim behind W, whose wait is then cancelled: its claim goes.
	behindCtx, cancelBehind := context.WithCancel(ctx)
	behind := start(behindCtx, hb, request("k", hl, "X"))
	awaitCount(t, operator, prefix+"claims/", 7)
	cancelBehind()
	if r := await(t, behind, "X"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("X: %v, want context.Canceled", r.err)
	}
	for _, c := range others {
		if err := hb.Release(testCtx(t, waitBound), c); err != nil {
			t.Fatal(err)
		}
	}
	awaitCount(t, operator, prefix+"claims/", 2)
	notYet(t, w, "W behind H")

	if err := hb.Release(testCtx(t, waitBound), holder); err != nil {
		t.Fatal(err)
	}
	r := await(t, w, "W after H's release")
	if r.err != nil {
		t.Fatal(r.err)
	}
	// Read before W's release, whose delete may reach W's own watch if it
	// crosses the watch's cancel.
	if n := wc.events.Load(); n != 1 {
		t.Errorf("W's client received %d watch responses with events, want 1 (the delete of H's claim)", n)
	}
	if err := wb.Release(testCtx(t, waitBound), r.claim); err != nil {
		t.Fatal(err)
	}
}

// A claim deleted after its creation but before the watch on it reaches
// etcd is still reported lost, and promptly: the watch starts at etcd's
// current revision, and the read that settles the revisions between the
// claim's creation and the watch's start finds the claim gone. A
// TryAcquire's watch is always created after its claim (a waiting
// Acquire's is sent before and usually covers it from the start; the
// unit tests of the registry cover it losing that race).
func TestLossBeforeWatchIsCreated(t *testing.T) {
	prefix := uniquePrefix(t)
	operator := shared.Client(t)
	d := &deleteBeforeWatch{operator: operator, under: prefix + "claims/"}
	b, _ := newBackend(t, shared, prefix, func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainStreamInterceptor(d.intercept))
	})

	lost := newLostSignal()
	r := request("k", grant(t, b, 30*time.Second), "H")
	r.Wait = false
	r.OnLost = backend.LossFunc(lost.onLost)
	at := time.Now()
	_, err := b.Acquire(testCtx(t, waitBound), r)
	switch {
	case errors.Is(err, backend.ErrLeaseExpired):
		t.Logf("Acquire saw the loss itself: %v", err)
	case err != nil:
		t.Fatalf("Acquire: %v", err)
	default:
		t.Logf("OnLost %v after Acquire began", lost.await(t, lossBound, at))
	}
	if err := d.failed(); err != nil {
		t.Fatal(err)
	}
	if d.deleted.Load() == 0 {
		t.Fatal("the test did not delete the claim before its watch was created")
	}
}

// deleteBeforeWatch deletes the key of the first watch created under a
// prefix just before the create request leaves, and records the delete's
// revision.
type deleteBeforeWatch struct {
	operator *clientv3.Client
	under    string
	once     sync.Once
	deleted  atomic.Int64

	mu  sync.Mutex
	err error
}

func (d *deleteBeforeWatch) failed() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

func (d *deleteBeforeWatch) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}

func (d *deleteBeforeWatch) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
	method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != watchMethod {
		return s, err
	}
	return &createHook{ClientStream: s, onCreate: d.created}, nil
}

// created deletes the claim the first watch create under d.under is for,
// before the create is sent.
func (d *deleteBeforeWatch) created(cr *pb.WatchCreateRequest) {
	if !strings.HasPrefix(string(cr.Key), d.under) {
		return
	}
	d.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		resp, err := d.operator.Delete(ctx, string(cr.Key))
		switch {
		case err != nil:
			d.fail(err)
		case resp.Deleted != 1:
			d.fail(errors.New("the claim to delete was not there"))
		default:
			d.deleted.Store(resp.Header.Revision)
		}
	})
}

// Deletes made while a Backend's watch stream is down reach it once the
// stream is back: the holder's loss, and the release its waiter waits
// for. With the watches' resume revisions compacted meanwhile, the Backend
// reads the keys instead and finds both gone.
func TestNoDeleteLostWhileStreamDown(t *testing.T) {
	for _, compacted := range []bool{false, true} {
		name := "Resumed"
		if compacted {
			name = "Compacted"
		}
		t.Run(name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			var gate streamGate
			var watches claimWatches
			b, err := etcd.New(shared.Client(t, gate.configure, watches.configure), etcd.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			other, _ := newBackend(t, shared, prefix)
			operator := shared.Client(t)
			l := grant(t, b, 30*time.Second)

			lost := newLostSignal()
			r := request("held", l, "A")
			r.OnLost = backend.LossFunc(lost.onLost)
			held := acquire(t, b, r)
			ahead := acquire(t, other, request("k", grant(t, other, 30*time.Second), "H"))
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			defer cancel()
			w := start(ctx, b, request("k", l, "W"))
			awaitCount(t, operator, prefix+"claims/", 3)
			// The holder's loss watch starts a few milliseconds into the
			// hold, with a read of its key that closes the watch's start
			// gap. Cut only once it is set up: a read still to come would
			// find the claim deleted and report the loss without the
			// stream, which is right, but not what this test is about.
			watches.await(t, b.ClaimKey(held), int64(held.Token))

			gate.cut()
			if _, err := operator.Delete(testCtx(t, waitBound), b.ClaimKey(held)); err != nil {
				t.Fatal(err)
			}
			if err := other.Release(testCtx(t, waitBound), ahead); err != nil {
				t.Fatal(err)
			}
			var compactRev int64
			if compacted {
				put, err := operator.Put(testCtx(t, waitBound), prefix+"filler", "x")
				if err != nil {
					t.Fatal(err)
				}
				compactRev = put.Header.Revision
				if _, err := operator.Compact(testCtx(t, waitBound), compactRev, clientv3.WithCompactPhysical()); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-lost.fired:
				t.Fatal("OnLost fired while the watch stream was down")
			default:
			}
			notYet(t, w, "W while the watch stream was down")

			reopened := time.Now()
			gate.reopen()
			t.Logf("OnLost %v after the stream was let through again", lost.await(t, waitBound, reopened))
			res := await(t, w, "W after the release it waited for")
			if res.err != nil {
				t.Fatalf("W: %v", res.err)
			}
			t.Logf("W holds %v after the stream was let through again", time.Since(reopened))
			if n := gate.opened.Load(); n < 2 {
				t.Errorf("%d watch streams opened, want a second one after the cut", n)
			}
			if compacted {
				if low := gate.lowestStartAfterReopen.Load(); low == 0 || low > compactRev {
					t.Errorf("lowest start revision re-created after the cut: %d; want one at or below the compaction at %d", low, compactRev)
				}
			}
			if err := b.Release(testCtx(t, waitBound), res.claim); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// streamGate lets a test cut a client's watch streams and refuse new ones
// until it reopens, leaving its unary calls alone.
type streamGate struct {
	mu      sync.Mutex
	closed  bool
	reopens bool // reopen was called: record start revisions
	cancels []context.CancelFunc

	opened                 atomic.Int64
	lowestStartAfterReopen atomic.Int64
}

func (g *streamGate) configure(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainStreamInterceptor(g.intercept))
}

func (g *streamGate) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
	method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if method != watchMethod {
		return streamer(ctx, desc, cc, method, opts...)
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "test: watch streams are cut")
	}
	sctx, cancel := context.WithCancel(ctx)
	g.cancels = append(g.cancels, cancel)
	record := g.reopens
	g.mu.Unlock()
	s, err := streamer(sctx, desc, cc, method, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	g.opened.Add(1)
	if !record {
		return s, nil
	}
	return &createHook{ClientStream: s, onCreate: g.recordStart}, nil
}

// cut ends every open watch stream and refuses new ones.
func (g *streamGate) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for _, c := range g.cancels {
		c()
	}
	g.cancels = nil
}

// reopen lets watch streams through again.
func (g *streamGate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed, g.reopens = false, true
}

// recordStart keeps the lowest start revision of the watches created
// after reopen.
func (g *streamGate) recordStart(cr *pb.WatchCreateRequest) {
	if cr.StartRevision == 0 {
		return
	}
	for {
		low := g.lowestStartAfterReopen.Load()
		if low != 0 && low <= cr.StartRevision {
			return
		}
		if g.lowestStartAfterReopen.CompareAndSwap(low, cr.StartRevision) {
			return
		}
	}
}

// claimWatches follows, through gRPC interceptors on one client, the
// backend's watches of single keys: the revision etcd created each at, and
// the keys its watch reads (see isWatchRead) have read and got an answer
// for.
type claimWatches struct {
	mu      sync.Mutex
	created map[string]int64 // key -> the revision of the create's answer
	read    map[string]bool
	changed chan struct{} // closed and replaced at each change
}

func (c *claimWatches) configure(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions,
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
			cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil && isWatchRead(req) {
				c.update(func() {
					for _, op := range req.(*pb.TxnRequest).Success {
						c.read[string(op.GetRequestRange().Key)] = true
					}
				})
			}
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
			method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || method != watchMethod {
				return s, err
			}
			var pending []string // keys of the creates sent, answered in order
			var mu sync.Mutex
			return &createHook{ClientStream: s,
				onCreate: func(cr *pb.WatchCreateRequest) {
					mu.Lock()
					defer mu.Unlock()
					pending = append(pending, string(cr.Key))
				},
				onResponse: func(resp *pb.WatchResponse) {
					if !resp.Created {
						return
					}
					mu.Lock()
					key := pending[0]
					pending = pending[1:]
					mu.Unlock()
					if !resp.Canceled {
						c.update(func() { c.created[key] = resp.Header.GetRevision() })
					}
				},
			}, nil
		}))
}

func (c *claimWatches) update(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.created == nil {
		c.created, c.read = make(map[string]int64), make(map[string]bool)
	}
	f()
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// await waits up to waitBound until the watch of key, for deletes after
// revision token (a claim's loss watch), is fully set up: etcd has created
// it, and if it was created after revision token, the read that closes
// its start gap has been answered.
func (c *claimWatches) await(t testing.TB, key string, token int64) {
	t.Helper()
	deadline := time.After(waitBound)
	for {
		c.mu.Lock()
		rev, created := c.created[key]
		done := created && (rev <= token || c.read[key])
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		changed := c.changed
		c.mu.Unlock()
		if done {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the watch of %s not set up within %v", key, waitBound)
		}
	}
}
