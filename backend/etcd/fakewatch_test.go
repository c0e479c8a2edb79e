package etcd

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fakeEtcd is as much of etcd as the mux talks to: keys with create
// revisions, a revision counter, a compaction revision, watch streams that
// answer creates in order under the client's IDs, deliver deletes to the
// watches that cover them (replaying past ones, as etcd does), and every
// event to range watches, honour cancels and drop compacted watches; and
// reads in a Txn. Safe for concurrent use.
type fakeEtcd struct {
	mu      sync.Mutex
	rev     int64
	compact int64
	keys    map[string]int64 // key -> create revision of the live incarnation
	deletes []fakeDelete     // every delete, in revision order
	history []*mvccpb.Event  // every put and delete, in revision order, for range watches
	streams []*fakeStream    // every stream opened, in order
	openErr error            // non-nil: opening a stream fails
	refuse  map[string]string
	held    bool // responses wait in stream.held until release
	reads   int  // Txns served
	readErr error
	lagging bool          // refuse reads at a given revision, as a member behind it would
	changed chan struct{} // cap 1: signalled after every request served
	// muxSends counts the requests sent from the mux's receive or check
	// goroutines, which must never send (see watch.go): a real stream's
	// Send can block there until the client reads, which only they do.
	muxSends int
}

type fakeDelete struct {
	key     string
	rev     int64
	created int64 // the create revision of the incarnation deleted
}

func newFakeEtcd() *fakeEtcd {
	return &fakeEtcd{rev: 1, keys: make(map[string]int64), refuse: make(map[string]string), changed: make(chan struct{}, 1)}
}

// fakeStream is one watch stream of fakeEtcd.
type fakeStream struct {
	e       *fakeEtcd
	ctx     context.Context
	resp    chan *pb.WatchResponse
	broken  chan struct{} // closed by breakStream
	sent    []*pb.WatchRequest
	watches map[int64]*fakeWatch
	held    []*pb.WatchResponse
}

type fakeWatch struct {
	key    string
	end    string // a range watch's range end; "" for one key
	minRev int64
}

// covers reports whether key is watched by w.
func (w *fakeWatch) covers(key string) bool {
	if w.end == "" {
		return key == w.key
	}
	return w.key <= key && key < w.end
}

func (e *fakeEtcd) open(ctx context.Context) (watchStream, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.openErr != nil {
		return nil, e.openErr
	}
	s := &fakeStream{
		e: e, ctx: ctx,
		resp:    make(chan *pb.WatchResponse, 1<<16),
		broken:  make(chan struct{}),
		watches: make(map[int64]*fakeWatch),
	}
	e.streams = append(e.streams, s)
	return s, nil
}

func (s *fakeStream) Send(req *pb.WatchRequest) error {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-s.broken:
		return errors.New("fake: stream broken")
	case <-s.ctx.Done():
		return s.ctx.Err()
	default:
	}
	s.sent = append(s.sent, req)
	if onMuxGoroutine() {
		e.muxSends++
	}
	defer e.signal()
	hdr := func() *pb.ResponseHeader { return &pb.ResponseHeader{Revision: e.rev} }
	switch {
	case req.GetCreateRequest() != nil:
		cr := req.GetCreateRequest()
		key := string(cr.Key)
		if reason, ok := e.refuse[key]; ok {
			s.sendLocked(&pb.WatchResponse{Header: hdr(), WatchId: -1, Created: true, Canceled: true, CancelReason: reason})
			return nil
		}
		s.sendLocked(&pb.WatchResponse{Header: hdr(), WatchId: cr.WatchId, Created: true})
		if cr.StartRevision != 0 && cr.StartRevision <= e.compact {
			s.sendLocked(&pb.WatchResponse{Header: hdr(), WatchId: cr.WatchId, Canceled: true, CompactRevision: e.compact})
			return nil
		}
		w := &fakeWatch{key: key, end: string(cr.RangeEnd), minRev: cr.StartRevision}
		if w.minRev == 0 {
			w.minRev = e.rev + 1
		}
		s.watches[cr.WatchId] = w
		if w.end != "" {
			for _, ev := range e.history {
				if w.covers(string(ev.Kv.Key)) && ev.Kv.ModRevision >= w.minRev {
					s.rangeEventLocked(cr.WatchId, ev)
				}
			}
			return nil
		}
		for _, d := range e.deletes {
			if d.key == key && d.rev >= w.minRev {
				s.eventLocked(cr.WatchId, d)
			}
		}
	case req.GetCancelRequest() != nil:
		id := req.GetCancelRequest().WatchId
		if _, ok := s.watches[id]; ok {
			delete(s.watches, id)
			s.sendLocked(&pb.WatchResponse{Header: hdr(), WatchId: id, Canceled: true})
		}
	}
	return nil
}

func (s *fakeStream) eventLocked(id int64, d fakeDelete) {
	s.sendLocked(&pb.WatchResponse{
		Header:  &pb.ResponseHeader{Revision: s.e.rev},
		WatchId: id,
		Events:  []*mvccpb.Event{{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(d.key), ModRevision: d.rev}}},
	})
}

func (s *fakeStream) rangeEventLocked(id int64, ev *mvccpb.Event) {
	s.sendLocked(&pb.WatchResponse{Header: &pb.ResponseHeader{Revision: s.e.rev}, WatchId: id, Events: []*mvccpb.Event{ev}})
}

// recordLocked adds ev to the history and sends it to the range watches
// that cover it.
func (e *fakeEtcd) recordLocked(ev *mvccpb.Event) {
	e.history = append(e.history, ev)
	for _, s := range e.streams {
		for id, w := range s.watches {
			if w.end != "" && w.covers(string(ev.Kv.Key)) && w.minRev <= ev.Kv.ModRevision {
				s.rangeEventLocked(id, ev)
			}
		}
	}
}

func (s *fakeStream) sendLocked(r *pb.WatchResponse) {
	select {
	case <-s.broken:
		return // a dead connection delivers nothing
	default:
	}
	if s.e.held {
		s.held = append(s.held, r)
		return
	}
	s.resp <- r
}

func (s *fakeStream) Recv() (*pb.WatchResponse, error) {
	select {
	case <-s.broken:
		return nil, errors.New("fake: stream broken")
	default:
	}
	select {
	case r := <-s.resp:
		return r, nil
	case <-s.broken:
		return nil, errors.New("fake: stream broken")
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

func (e *fakeEtcd) signal() {
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until cond, which reads the fake under e.mu, holds; it is
// checked again after every request the fake serves.
func (e *fakeEtcd) waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.After(bound)
	for {
		e.mu.Lock()
		ok := cond()
		e.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-e.changed:
		case <-deadline:
			t.Fatalf("%s: not seen within %v", what, bound)
		}
	}
}

// put creates key (a new incarnation if it was absent).
func (e *fakeEtcd) put(key string) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rev++
	if _, ok := e.keys[key]; !ok {
		e.keys[key] = e.rev
	}
	e.recordLocked(&mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), CreateRevision: e.keys[key], ModRevision: e.rev}})
	return e.rev
}

// rewrite puts key, which exists, again, and sends the put to every watch
// of the key, as etcd does to watches without the NOPUT filter (the fake
// ignores filters: the mux must drop puts for delete watches itself).
func (e *fakeEtcd) rewrite(key string) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rev++
	e.recordLocked(&mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), CreateRevision: e.keys[key], ModRevision: e.rev}})
	for _, s := range e.streams {
		for id, w := range s.watches {
			if w.end == "" && w.key == key && w.minRev <= e.rev {
				s.sendLocked(&pb.WatchResponse{
					Header:  &pb.ResponseHeader{Revision: e.rev},
					WatchId: id,
					Events: []*mvccpb.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{
						Key: []byte(key), CreateRevision: e.keys[key], ModRevision: e.rev}}},
				})
			}
		}
	}
	return e.rev
}

// del deletes key and tells the watches that cover the delete.
func (e *fakeEtcd) del(key string) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rev++
	d := fakeDelete{key: key, rev: e.rev, created: e.keys[key]}
	delete(e.keys, key)
	e.deletes = append(e.deletes, d)
	e.recordLocked(&mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: d.rev}})
	for _, s := range e.streams {
		for id, w := range s.watches {
			if w.end == "" && w.key == key && w.minRev <= d.rev {
				s.eventLocked(id, d)
			}
		}
	}
	return e.rev
}

// compactNow compacts at the current revision, dropping the watches that
// start at or below it, as etcd does for unsynced watches.
func (e *fakeEtcd) compactNow() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.compact = e.rev
	return e.compact
}

// breakStream ends the newest stream as a failed connection would.
func (e *fakeEtcd) breakStream() {
	e.mu.Lock()
	defer e.mu.Unlock()
	close(e.streams[len(e.streams)-1].broken)
}

// hold keeps every response back until release; release sends them, in
// order.
func (e *fakeEtcd) hold() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.held = true
}

func (e *fakeEtcd) release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.held = false
	for _, s := range e.streams {
		for _, r := range s.held {
			s.sendLocked(r)
		}
		s.held = nil
	}
}

func (e *fakeEtcd) setLagging(lagging bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lagging = lagging
}

func (e *fakeEtcd) setOpenErr(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.openErr = err
}

func (e *fakeEtcd) refuseKey(key, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.refuse[key] = reason
}

func (e *fakeEtcd) allowKey(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.refuse, key)
}

// createdAt returns the create revision of the incarnation of key that
// exists at revision rev (0: now), if one does. Called with e.mu held.
func (e *fakeEtcd) createdAt(key string, rev int64) (int64, bool) {
	cr, live := e.keys[key]
	if rev == 0 {
		return cr, live
	}
	if live && cr <= rev {
		return cr, true
	}
	for _, d := range e.deletes {
		if d.key == key && d.created <= rev && rev < d.rev {
			return d.created, true
		}
	}
	return 0, false
}

// keysInLocked returns the keys op reads that ever existed, in order:
// its key, or every key in its range.
func (e *fakeEtcd) keysInLocked(op clientv3.Op) []string {
	key, end := string(op.KeyBytes()), string(op.RangeBytes())
	if end == "" {
		return []string{key}
	}
	seen := make(map[string]bool)
	for k := range e.keys {
		seen[k] = true
	}
	for _, d := range e.deletes {
		seen[d.key] = true
	}
	var out []string
	for k := range seen {
		if key <= k && k < end {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// readCount returns how many Txns and Gets the fake has served.
func (e *fakeEtcd) readCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reads
}

func (e *fakeEtcd) streamCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.streams)
}

// creates returns the create requests sent on stream i so far.
func (e *fakeEtcd) creates(i int) []*pb.WatchCreateRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.createsLocked(i)
}

func (e *fakeEtcd) createsLocked(i int) []*pb.WatchCreateRequest {
	if i >= len(e.streams) {
		return nil
	}
	var out []*pb.WatchCreateRequest
	for _, r := range e.streams[i].sent {
		if cr := r.GetCreateRequest(); cr != nil {
			out = append(out, cr)
		}
	}
	return out
}

// cancelsLocked returns the IDs cancelled on stream i so far.
func (e *fakeEtcd) cancelsLocked(i int) []int64 {
	if i >= len(e.streams) {
		return nil
	}
	var out []int64
	for _, r := range e.streams[i].sent {
		if c := r.GetCancelRequest(); c != nil {
			out = append(out, c.WatchId)
		}
	}
	return out
}

// fakeKV serves the mux's check Txns (Gets only) from fakeEtcd.
type fakeKV struct {
	clientv3.KV // nil: only Txn is used
	e           *fakeEtcd
}

func (f fakeKV) Txn(context.Context) clientv3.Txn { return &fakeTxn{e: f.e} }

func (f fakeKV) Get(_ context.Context, key string, _ ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := f.Txn(context.Background()).Then(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, err
	}
	rr := resp.Responses[0].GetResponseRange()
	rr.Header = resp.Header
	return (*clientv3.GetResponse)(rr), nil
}

type fakeTxn struct {
	e   *fakeEtcd
	ops []clientv3.Op
}

func (t *fakeTxn) If(...clientv3.Cmp) clientv3.Txn      { return t }
func (t *fakeTxn) Else(...clientv3.Op) clientv3.Txn     { return t }
func (t *fakeTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.ops = ops; return t }

func (t *fakeTxn) Commit() (*clientv3.TxnResponse, error) {
	e := t.e
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reads++
	defer e.signal()
	if e.readErr != nil {
		return nil, e.readErr
	}
	resp := &clientv3.TxnResponse{Header: &pb.ResponseHeader{Revision: e.rev}, Succeeded: true}
	for _, op := range t.ops {
		if op.Rev() != 0 && (e.lagging || op.Rev() > e.rev) {
			return nil, rpctypes.ErrFutureRev
		}
	}
	for _, op := range t.ops {
		rr := &pb.RangeResponse{}
		for _, key := range e.keysInLocked(op) {
			if cr, ok := e.createdAt(key, op.Rev()); ok && (op.MaxCreateRev() == 0 || cr <= op.MaxCreateRev()) {
				rr.Kvs = append(rr.Kvs, &mvccpb.KeyValue{Key: []byte(key), CreateRevision: cr})
			}
		}
		resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}})
	}
	return resp, nil
}

// testMux is a mux on a fakeEtcd whose goroutines end with the test.
type testMux struct {
	*mux
	e      *fakeEtcd
	closed bool // the etcd client counts as closed
	mu     sync.Mutex
}

func newTestMux(t *testing.T) *testMux {
	t.Helper()
	e := newFakeEtcd()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	spawn := func(f func()) bool {
		if ctx.Err() != nil {
			return false
		}
		wg.Go(f)
		return true
	}
	tm := &testMux{e: e}
	tm.mux = newMuxWith(ctx, e.open, fakeKV{e: e}, tm.clientClosed, spawn)
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.muxSends > 0 {
			t.Errorf("%d requests sent from the mux's receive or check goroutine", e.muxSends)
		}
	})
	return tm
}

// onMuxGoroutine reports whether the caller runs on the mux's receive or
// check goroutine.
func onMuxGoroutine() bool {
	buf := make([]byte, 64<<10)
	stack := string(buf[:runtime.Stack(buf, false)])
	return strings.Contains(stack, "(*mux).receive(") || strings.Contains(stack, "(*mux).check(")
}

func (tm *testMux) clientClosed() bool {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.closed
}

func (tm *testMux) closeClient() {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.closed = true
}

// recTarget records what the mux tells a watch's target.
type recTarget struct {
	deleted chan int64
	failed  chan error
}

func newRecTarget() *recTarget {
	return &recTarget{deleted: make(chan int64, 2), failed: make(chan error, 2)}
}

func (r *recTarget) notify(n watchNews) {
	if n.err != nil {
		r.failed <- n.err
	} else {
		r.deleted <- n.rev
	}
}

// bound is how long these tests wait for something that should happen.
const bound = 5 * time.Second

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(bound):
		t.Fatalf("%s: nothing within %v", what, bound)
		var zero T
		return zero
	}
}

func none[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: got %v, want nothing", what, v)
	default:
	}
}
