package etcd

import (
	"context"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// Watches of single claims, multiplexed on one stream. (The same stream
// also carries the range watches of observations: watchrange.go.) What a
// Backend watches, and why, is in the package documentation ("Watches");
// this file and watchstream.go are how.
//
// clientv3's Watcher is not used for them: it starts a goroutine for every
// Watch call, and holding 10,000 locks must stay cheap. Instead each
// Backend keeps one gRPC watch stream (the mux) and creates every watch on
// it, with an ID the client picks (WatchCreateRequest.watch_id, etcd 3.4
// and later). One receive goroutine dispatches responses by that ID, so a
// create never waits for its answer, and a cancel can follow a create at
// once, before etcd has confirmed it (etcd handles a stream's requests in
// order). Matching creates to their answers in order would have worked as
// well, and is still done for one case: etcd answers a create it refuses
// with watch ID -1 whatever ID was asked for, so the mux also keeps the
// IDs of unanswered creates in send order and pairs each "created" answer
// with the oldest.
//
// Sends are serialized: requests are queued on the stream and sent by one
// flusher at a time, which is whichever caller queued a request while no
// one was sending (so an Acquire's create and a Release's cancel leave at
// once, and a Release's cancel leaves before its delete Txn). The receive
// goroutine never sends: a Send can block on flow control, and the server
// stops reading when the client stops reading, so a receiver blocked in
// Send could deadlock the stream. The requests the receiver queues (the
// cancel of a watch that fired) are sent by the mux's run goroutine, which
// also opens the stream and opens it again when it fails. With the
// receiver that makes two goroutines per Backend, whatever the number of
// watches, plus one that exists only while reads are pending
// (watchcheck.go).
//
// Every watch has a resume revision, from: the delete it waits for is at a
// revision >= from, so a watch created again from `from` misses nothing.
// A single-key delete watch never needs to move that revision forward
// (its first delete ends it), except after a read that found the key
// still there (then from becomes the read's revision + 1). A watch is
// first created at etcd's current revision rather than at from, because
// etcd serves a watch that starts in the past on a 100ms timer; a read of
// the key settles the deletes in between (watchcheck.go). The stream is
// opened again, with backoff, when it fails, when etcd's member loses its
// leader (the stream carries clientv3.WithRequireLeader, so a member cut
// off from the cluster closes it instead of going silent) and when etcd
// refuses a create for an expired auth token; every live watch is then
// created again from its resume revision. A watch whose resume revision
// has been compacted away is settled by a read of the key instead: gone if
// the key is absent or is another incarnation, else watched again from the
// read's revision + 1.

// watchTarget is told what becomes of a watch. The mux calls it without
// holding its lock, from the receive goroutine or a check goroutine, so
// it must not block, must not wait for the mux and must not send: it may
// end watches with stopLater, never with stop. A watch of a delete tells
// its target once, a range watch once per batch of events and once at its
// end (watchrange.go).
type watchTarget interface{ notify(n watchNews) }

// watchNews is what a watch tells its target: the watched incarnation of
// the key is gone (deleted at revision rev, or found absent or replaced at
// rev); a range watch's events, in revision order, whole revisions at a
// time; a range watch's start revision was compacted away (compacted); or
// the watch cannot be served (err: etcd refused it, or the etcd client was
// closed). The last three cases end a range watch.
type watchNews struct {
	rev       int64
	prev      *mvccpb.KeyValue // the deleted incarnation's last state, if the watch asked for it (keyWatch.prev)
	evs       []*mvccpb.Event
	compacted bool
	err       error
}

// keyWatch is one watch for the delete of one incarnation of a key: the
// incarnation that exists at revision from-1; or, if ranged is set, a
// range watch of every event of a directory (watchrange.go).
type keyWatch struct {
	key    string
	target watchTarget
	ranged bool // a range watch of the keys under key
	// older, if set, makes it a watch of the claims older than older in
	// the directory key, for the first delete of one of them: a counted
	// claim's first waiter, which waits for any of need holders to go
	// (watchrange.go).
	older int64
	need  int
	// puts makes it a watch for any change of the incarnation: its delete,
	// or a put that rewrites it (a counted waiter's predecessor recording
	// its permit). The target hears of either as the key gone.
	puts bool
	// prev asks etcd to send, with the delete, the incarnation's last
	// state (watchNews.prev); a waiter learns from it whether its
	// predecessor had held the key (see waitAt).
	prev bool

	// Guarded by mux.mu.
	from  int64 // resume revision: the delete sought is at >= from
	now   bool  // the next create starts at etcd's current revision (see watchcheck.go)
	state watchState
	s     *wstream // the stream it is created on; nil if none
	id    int64    // its ID on s
}

type watchState uint8

const (
	watchLive     watchState = iota // wanted: created on the current stream, or to be
	watchChecking                   // its resume revision was compacted: a Get is pending
	watchDone                       // stopped or finished; nothing more happens to it
)

// watchStream is the part of a gRPC watch stream the mux uses.
type watchStream interface {
	Send(*pb.WatchRequest) error
	Recv() (*pb.WatchResponse, error)
}

// wstream is one opened watch stream and the mux's state on it. All fields
// but st and cancel are guarded by mux.mu.
type wstream struct {
	st     watchStream
	cancel context.CancelFunc
	done   chan struct{} // closed by the receiver once it has stopped

	byID     map[int64]*keyWatch
	creates  []pendingCreate // creates not yet answered, in send order
	out      []*pb.WatchRequest
	flushing bool // a flusher is sending out; others leave their requests to it
	broken   bool // a Send or Recv failed: queue nothing more
	heard    bool // at least one response arrived (for the backoff)
}

// pendingCreate is a create request that etcd has not answered yet.
type pendingCreate struct {
	id    int64
	start int64 // its StartRevision; 0: etcd's current revision
}

// mux multiplexes a Backend's watches, single-key and range, on one gRPC
// watch stream.
// Safe for concurrent use.
type mux struct {
	open  func(ctx context.Context) (watchStream, error)
	kv    clientv3.KV     // for the checks of compacted watches and of predecessor waits
	ctx   context.Context // the Backend's lifetime
	gone  func() bool     // reports whether the etcd client was closed
	spawn func(func()) bool

	kick chan struct{} // cap 1: the run goroutine should flush the current stream

	mu       sync.Mutex
	live     map[*keyWatch]struct{} // every watch not done
	cur      *wstream               // the stream in use; nil while (re)opening
	running  bool                   // the run goroutine was started
	down     error                  // set once the mux has stopped for good
	nextID   int64
	checks   []check // see watchcheck.go
	checking bool    // a check goroutine runs
}

// noPut makes etcd deliver deletes only. Read-only.
var noPut = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}

func newMux(ctx context.Context, cli *clientv3.Client, spawn func(func()) bool) *mux {
	wc := pb.NewWatchClient(cli.ActiveConnection())
	// The connection's interceptors add the auth token, and clientv3's
	// stream interceptor fetches a fresh one for every new stream.
	// WaitForReady: while etcd is unreachable, opening waits for gRPC to
	// reconnect instead of failing at once.
	open := func(ctx context.Context) (watchStream, error) { return wc.Watch(ctx, grpc.WaitForReady(true)) }
	gone := func() bool { return cli.Ctx().Err() != nil }
	return newMuxWith(ctx, open, cli, gone, spawn)
}

// newMuxWith is newMux with its parts given: open opens a watch stream,
// kv serves the checks of compacted watches, gone reports that the etcd
// client was closed.
func newMuxWith(ctx context.Context, open func(context.Context) (watchStream, error), kv clientv3.KV,
	gone func() bool, spawn func(func()) bool) *mux {
	return &mux{open: open, kv: kv, ctx: ctx, gone: gone, spawn: spawn,
		kick: make(chan struct{}, 1), live: make(map[*keyWatch]struct{})}
}

// start begins watching w.key for the delete of the incarnation that
// exists at revision w.from-1 and reports to w.target. It does not wait for etcd: the create is sent at
// once if the stream is up, else as soon as it is. If the mux has stopped
// for good, the target is told the watch failed before start returns. A
// keyWatch is started at most once.
func (m *mux) start(w *keyWatch) {
	s, err := m.begin(w)
	if err != nil {
		w.noticeOf(0, err)()
	}
	m.flush(s)
}

// begin is start without the sends and the call to the target: it makes w
// live and queues its create, and returns the stream the caller must
// flush (nil if no stream is up: the next one creates w), or, if the mux
// has stopped for good, the error the target would hear. It takes only
// m.mu, so a caller may hold its own lock around it (see registry.mature).
func (m *mux) begin(w *keyWatch) (*wstream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down != nil {
		w.state = watchDone
		return nil, m.down
	}
	w.state = watchLive
	m.live[w] = struct{}{}
	if !m.running {
		m.running = m.spawn(m.run)
	}
	s := m.cur
	if s != nil {
		m.createLocked(s, w)
	}
	return s, nil
}

// stop ends w: its target hears nothing more once stop has returned,
// except for a call the mux had already begun. Stopping a watch that is
// done does nothing. A delete event for w that crosses the cancel on the
// wire is dropped (its ID is no longer known). The cancel is sent before
// stop returns, unless another caller is sending.
func (m *mux) stop(w *keyWatch) {
	m.flush(m.end(w))
}

// stopLater is stop for a watch target, which is called on the receive or
// a check goroutine: those must never send (see the top of this file), so
// the cancel is left to the run goroutine.
func (m *mux) stopLater(w *keyWatch) {
	if m.end(w) != nil {
		m.kickFlush()
	}
}

// end marks w done and queues its cancel; it returns the stream to flush,
// or nil if nothing was queued.
func (m *mux) end(w *keyWatch) *wstream {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.state == watchDone {
		return nil
	}
	return m.doneLocked(w)
}

// doneLocked marks w done and, if it is created on a stream, queues its
// cancel there and returns that stream (else nil).
func (m *mux) doneLocked(w *keyWatch) *wstream {
	s := w.s
	if s != nil {
		m.cancelLocked(w)
	}
	w.state = watchDone
	delete(m.live, w)
	return s
}

// createLocked queues the create of w on s under a fresh ID.
func (m *mux) createLocked(s *wstream, w *keyWatch) {
	m.nextID++ // IDs start at 1: etcd reads 0 as "pick one for me"
	w.s, w.id = s, m.nextID
	start := w.from
	if w.now {
		start, w.now = 0, false
	}
	s.byID[w.id] = w
	s.creates = append(s.creates, pendingCreate{id: w.id, start: start})
	cr := &pb.WatchCreateRequest{Key: []byte(w.key), StartRevision: start, WatchId: w.id}
	if !w.puts && !w.ranged {
		cr.Filters = noPut // a watch of a delete
		cr.PrevKv = w.prev
	}
	if w.ranged || w.older != 0 {
		cr.RangeEnd = []byte(clientv3.GetPrefixRangeEnd(w.key))
	}
	s.out = append(s.out, &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}})
}

// cancelLocked queues the cancel of w's watch on its stream and forgets
// its ID, so that whatever etcd still sends for it is dropped.
func (m *mux) cancelLocked(w *keyWatch) {
	s := w.s
	delete(s.byID, w.id)
	s.out = append(s.out, &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
		CancelRequest: &pb.WatchCancelRequest{WatchId: w.id},
	}})
	w.s, w.id = nil, 0
}

// flush sends what is queued on s, if any (s nil: nothing), unless another
// flusher is at it (it will send what was queued meanwhile before it stops). It must not be
// called by the receive goroutine, see the top of this file. A failed
// Send marks s broken and cancels it; the run goroutine then opens a new
// stream and creates every live watch on it again.
func (m *mux) flush(s *wstream) {
	m.mu.Lock()
	if s == nil || s.flushing || s.broken || m.cur != s {
		m.mu.Unlock()
		return
	}
	s.flushing = true
	for len(s.out) > 0 {
		batch := s.out
		s.out = nil
		m.mu.Unlock()
		var err error
		for _, req := range batch {
			if err = s.st.Send(req); err != nil {
				break
			}
		}
		m.mu.Lock()
		if err != nil {
			s.broken = true
			s.out = nil
			break
		}
	}
	s.flushing = false
	broken := s.broken
	m.mu.Unlock()
	if broken {
		s.cancel() // the receiver's Recv fails and the run goroutine reopens
	}
}

// kickFlush asks the run goroutine to flush the current stream; for the
// receive and check goroutines, which must not send themselves.
func (m *mux) kickFlush() {
	select {
	case m.kick <- struct{}{}:
	default: // a kick is already pending
	}
}

// notice is a call to a watch's target, collected under mux.mu and made
// after it is released.
type notice func()

func deliver(ns []notice) {
	for _, n := range ns {
		n()
	}
}

// noticeOf returns the call that tells w's target that its watch failed
// (err set), or else, for a range watch, that it was compacted, and for
// any other that its key is gone at rev.
func (w *keyWatch) noticeOf(rev int64, err error) notice {
	return func() { w.target.notify(watchNews{rev: rev, compacted: w.ranged && err == nil, err: err}) }
}

// finishLocked ends a live or checking watch whose key is gone (err nil),
// that was compacted (a range watch) or that failed, and returns the
// notice for its target (see noticeOf). If it is created
// on a stream, its cancel is queued there; the caller kicks a flush.
func (m *mux) finishLocked(w *keyWatch, rev int64, err error) notice {
	m.doneLocked(w)
	return w.noticeOf(rev, err)
}
