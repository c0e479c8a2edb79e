package etcd

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// run opens the watch stream, serves it until it fails and opens it again,
// until the Backend is closed or its etcd client is. It runs in its own
// goroutine, started with the first watch.
func (m *mux) run() {
	var bo backend.Backoff
	for {
		if s := m.openStream(); s != nil {
			m.serve(s)
			m.mu.Lock()
			if s.heard {
				bo.Reset()
			}
			m.mu.Unlock()
		}
		if m.ctx.Err() == nil && m.gone() {
			m.stopForGood(fmt.Errorf("%w: etcd watch: the etcd client was closed", backend.ErrUnavailable))
			return
		}
		if m.ctx.Err() != nil || !bo.Wait(m.ctx.Done()) {
			return
		}
	}
}

// openStream opens a stream, makes it the current one and queues the
// create of every live watch on it. It returns nil if the stream could
// not be opened.
func (m *mux) openStream() *wstream {
	// WithRequireLeader: a member that loses its leader ends the stream
	// instead of keeping it open and silent.
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(m.ctx))
	st, err := m.open(sctx)
	if err != nil {
		cancel()
		return nil
	}
	s := &wstream{st: st, cancel: cancel, done: make(chan struct{}), byID: make(map[int64]*keyWatch)}
	m.mu.Lock()
	m.cur = s
	for w := range m.live {
		if w.state == watchLive {
			m.createLocked(s, w)
		}
	}
	m.mu.Unlock()
	// The receiver starts after s is current, so nothing it reads is
	// taken for a stale stream's.
	if !m.spawn(func() { m.receive(s) }) {
		m.teardown(s)
		close(s.done)
		return nil
	}
	return s
}

// serve flushes s whenever asked to, until s fails or the Backend is
// closed; it returns once the receiver has stopped.
func (m *mux) serve(s *wstream) {
	m.flush(s)
	for {
		select {
		case <-m.kick:
			m.flush(s)
		case <-s.done:
			return
		case <-m.ctx.Done():
			s.cancel()
			<-s.done
			return
		}
	}
}

// receive reads s until it fails, dispatching every response. It is the
// only goroutine that reads s, and it never sends (see watch.go).
func (m *mux) receive(s *wstream) {
	defer close(s.done)
	for {
		resp, err := s.st.Recv()
		if err != nil {
			m.teardown(s)
			return
		}
		ns, kick, fail := m.dispatch(s, resp)
		deliver(ns)
		if kick {
			m.kickFlush()
		}
		if fail {
			s.cancel() // the next Recv fails and tears s down
		}
	}
}

// teardown retires s: its watches are no longer created anywhere and are
// created again on the next stream.
func (m *mux) teardown(s *wstream) {
	s.cancel()
	m.mu.Lock()
	defer m.mu.Unlock()
	s.broken = true
	s.out = nil
	for _, w := range s.byID {
		w.s, w.id = nil, 0
	}
	clear(s.byID)
	if m.cur == s {
		m.cur = nil
	}
}

// dispatch applies one response of s. It returns the calls to make to
// targets, whether requests were queued for the run goroutine to send, and
// whether s must be abandoned.
func (m *mux) dispatch(s *wstream, r *pb.WatchResponse) (ns []notice, kick, fail bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != s {
		return nil, false, false // a stream being retired
	}
	// A response that makes the stream fail is no sign that it works: a
	// stream whose creates etcd keeps refusing is reopened with backoff.
	defer func() { s.heard = s.heard || !fail }()
	if r.Created {
		if len(s.creates) == 0 {
			return nil, false, true // an answer to no create of ours
		}
		pc := s.creates[0]
		s.creates = s.creates[1:]
		w := s.byID[pc.id] // nil if stopped meanwhile
		if r.Canceled {
			// etcd refused the create; the answer's ID is -1 whatever
			// the cause, hence the pairing in send order.
			if r.CancelReason == rpctypes.ErrGRPCInvalidAuthToken.Error() || r.CancelReason == rpctypes.ErrGRPCAuthOldRevision.Error() {
				// The stream's auth token expired or is older than the
				// last change of the auth configuration: a new stream
				// gets a fresh one (clientv3's interceptor fetches it).
				return nil, false, true
			}
			if w == nil {
				return nil, false, false
			}
			delete(s.byID, pc.id)
			w.s, w.id = nil, 0
			err := fmt.Errorf("%w: etcd watch on %s refused: %s", backend.ErrUnavailable, w.key, r.CancelReason)
			if r.CancelReason == rpctypes.ErrGRPCPermissionDenied.Error() {
				err = fmt.Errorf("%w: etcd watch on %s refused: %w", backend.ErrUnavailable, w.key, rpctypes.ErrPermissionDenied)
			}
			return []notice{m.finishLocked(w, 0, err)}, false, false
		}
		if r.WatchId != pc.id {
			return nil, false, true // etcd would not do that; start over
		}
		if w == nil {
			return nil, false, false
		}
		covered := pc.start
		if covered == 0 {
			// Created at etcd's current revision, which the header
			// carries (read after the watch was registered): every
			// delete above it is delivered.
			covered = r.Header.GetRevision() + 1
		}
		if covered > w.from {
			// A read settles the deletes from w.from on (watchcheck.go).
			m.startChecksLocked(check{w: w, at: covered - 1})
		}
		return nil, false, false
	}
	w := s.byID[r.WatchId] // nil if stopped meanwhile; progress notifications have ID -1
	switch {
	case w == nil:
		return nil, false, false
	case r.CompactRevision != 0 && w.ranged:
		// The watch's start revision was compacted; etcd dropped it. Its
		// target resynchronises with a read (watchrange.go).
		return []notice{m.finishLocked(w, 0, nil)}, true, false
	case r.CompactRevision != 0:
		m.cancelLocked(w) // lets etcd forget the ID as well
		w.state = watchChecking
		m.startChecksLocked(check{w: w})
		return nil, true, false
	case r.Canceled:
		// The answer to one of our cancels (its ID is forgotten: w is
		// nil), or etcd dropped a watch by itself, which it does not do
		// today; such a watch is created again.
		delete(s.byID, r.WatchId)
		m.createLocked(s, w)
		return nil, true, false
	case w.ranged:
		return m.rangeEventsLocked(w, r.Events), false, false
	}
	for _, ev := range r.Events {
		// With the NOPUT filter, deletes only (and puts too for a
		// watch of puts, which any change ends). The first one at or
		// above from is the incarnation's: a later incarnation of the
		// name needs this one deleted first.
		if rev := ev.Kv.ModRevision; (ev.Type == mvccpb.DELETE || w.puts) && rev >= w.from {
			m.doneLocked(w)
			n := watchNews{rev: rev, prev: ev.PrevKv} // nil unless w.prev, which watches deletes only
			return []notice{func() { w.target.notify(n) }}, true, false
		}
	}
	return nil, false, false
}

// stopForGood fails every watch with err and makes later ones fail at
// once: the etcd client is closed, nothing can be watched any more.
func (m *mux) stopForGood(err error) {
	m.mu.Lock()
	m.down = err
	var ns []notice
	for w := range m.live {
		ns = append(ns, m.finishLocked(w, 0, err))
	}
	m.checks = nil
	m.mu.Unlock()
	deliver(ns)
}
