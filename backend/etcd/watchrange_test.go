package etcd

import (
	"errors"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// rangeRec records what a range watch's target hears, one line per event
// ("put d/a 5"), then "compacted" or "failed".
type rangeRec struct{ heard chan string }

func newRangeRec() *rangeRec { return &rangeRec{heard: make(chan string, 100)} }

func (r *rangeRec) notify(n watchNews) {
	for _, ev := range n.evs {
		r.heard <- fmt.Sprintf("%s %s %d", map[mvccpb.Event_EventType]string{mvccpb.PUT: "put", mvccpb.DELETE: "del"}[ev.Type],
			ev.Kv.Key, ev.Kv.ModRevision)
	}
	switch {
	case n.compacted:
		r.heard <- "compacted"
	case n.err != nil:
		r.heard <- "failed"
	}
}

// expect checks that the next things heard are want, in order, and that
// nothing else came meanwhile.
func (r *rangeRec) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		if got := recv(t, r.heard, "range watch "+w); got != w {
			t.Fatalf("range watch heard %q, want %q", got, w)
		}
	}
}

// A range watch streams every event under its directory in revision
// order, beside a single-key watch on the same stream; after a stream
// break it is created again from the revision after the last one it
// delivered, so the events made while the stream was down arrive once
// each, in order; and when that revision has been compacted it tells its
// target and ends.
func TestRangeWatchStreamsResumesAndReportsCompaction(t *testing.T) {
	tm := newTestMux(t)
	e := tm.e
	before := e.put("d/x")
	rec := newRangeRec()
	w := newRangeWatch("d/", before+1, rec)
	tm.start(w)
	single := newRecTarget()
	tm.start(&keyWatch{key: "k", from: e.put("k") + 1, target: single})

	a := e.put("d/a")
	e.put("e/a") // outside the directory
	e.put("d")   // outside too: the range is the directory's keys only
	ra := e.rewrite("d/a")
	dx := e.del("d/x")
	dk := e.del("k")
	rec.expect(t, fmt.Sprintf("put d/a %d", a), fmt.Sprintf("put d/a %d", ra), fmt.Sprintf("del d/x %d", dx))
	if got := recv(t, single.deleted, "single-key delete"); got != dk {
		t.Fatalf("single-key watch: delete at %d, want %d", got, dk)
	}
	if n := e.streamCount(); n != 1 {
		t.Fatalf("%d streams, want 1 shared by both watches", n)
	}
	if cr := rangeCreate(t, e, 0); string(cr.RangeEnd) != "d0" || cr.StartRevision != before+1 || len(cr.Filters) != 0 {
		t.Fatalf("range create %v: want range [d/, d0) from %d, every event", cr, before+1)
	}

	// The stream breaks and stays down while the directory changes.
	e.setOpenErr(errors.New("fake: down"))
	e.breakStream()
	b := e.put("d/b")
	da := e.del("d/a")
	e.setOpenErr(nil)
	rec.expect(t, fmt.Sprintf("put d/b %d", b), fmt.Sprintf("del d/a %d", da))
	e.waitFor(t, func() bool { return len(e.createsLocked(1)) > 0 }, "the range watch created on the new stream")
	if cr := rangeCreate(t, e, 1); cr.StartRevision != dx+1 {
		t.Fatalf("range watch created again from %d, want %d (after the last event delivered)", cr.StartRevision, dx+1)
	}
	c := e.put("d/c")
	rec.expect(t, fmt.Sprintf("put d/c %d", c)) // and nothing twice before it
	none(t, rec.heard, "range watch after d/c")

	// Down again, and compacted past what was delivered.
	e.setOpenErr(errors.New("fake: down"))
	e.breakStream()
	e.put("d/d")
	e.compactNow()
	e.setOpenErr(nil)
	rec.expect(t, "compacted")
	tm.mux.mu.Lock()
	state := w.state
	tm.mux.mu.Unlock()
	if state != watchDone {
		t.Fatalf("compacted range watch in state %d, want done", state)
	}
	e.put("d/e")
	none(t, rec.heard, "range watch after its compaction")
}

// rangeCreate returns the first create of a range watch on stream i.
// (A new stream creates the live watches in no particular order.)
func rangeCreate(t *testing.T, e *fakeEtcd, i int) *pb.WatchCreateRequest {
	t.Helper()
	for _, cr := range e.creates(i) {
		if len(cr.RangeEnd) > 0 {
			return cr
		}
	}
	t.Fatalf("no range watch created on stream %d", i)
	return nil
}

// Stopping a range watch cancels it on the stream: nothing more is heard.
func TestRangeWatchStop(t *testing.T) {
	tm := newTestMux(t)
	e := tm.e
	rec := newRangeRec()
	w := newRangeWatch("d/", e.put("x")+1, rec)
	tm.start(w)
	a := e.put("d/a")
	rec.expect(t, fmt.Sprintf("put d/a %d", a))
	tm.stop(w)
	e.waitFor(t, func() bool { return len(e.cancelsLocked(0)) == 1 }, "the range watch's cancel")
	// A second watch of the directory hears d/b and d/c; the stopped one,
	// on the same stream, would have had d/b before d/c reached either.
	other := newRangeRec()
	tm.start(newRangeWatch("d/", a+1, other))
	b := e.put("d/b")
	c := e.put("d/c")
	other.expect(t, fmt.Sprintf("put d/b %d", b), fmt.Sprintf("put d/c %d", c))
	none(t, rec.heard, "stopped range watch")
}

// A watch of the claims older than a counted waiter is one create for the
// directory, deletes only; the read that settles its gap counts the older
// claims (one gone: it fires at once); puts and the deletes below its
// resume revision do not end it, the first delete at or above does.
func TestOlderWatch(t *testing.T) {
	tm := newTestMux(t)
	e := tm.e
	e.put("d/h1")
	e.put("d/h2")
	own := e.put("d/w")
	from := e.rev + 1

	// Deleted before the watch is created: the gap read finds it.
	gone := e.del("d/h1")
	early := newRecTarget()
	tm.start(newOlderWatch("d/", own, 2, from, early))
	if got := recv(t, early.deleted, "older watch after a delete in its gap"); got < gone {
		t.Fatalf("older watch fired at %d, want >= %d", got, gone)
	}
	cr := e.creates(0)[0]
	if string(cr.RangeEnd) != "d0" || cr.StartRevision != 0 || len(cr.Filters) != 1 {
		t.Fatalf("older watch create %v: want range [d/, d0) at the current revision, deletes only", cr)
	}

	// All of the need older claims there: only a later delete ends it.
	rec := newRecTarget()
	tm.start(newOlderWatch("d/", own, 1, e.rev+1, rec))
	e.waitFor(t, func() bool { return len(e.createsLocked(0)) == 2 }, "the second older watch")
	e.put("d/x")      // a newer claim
	e.rewrite("d/h2") // a holder's record
	e.rewrite("d/w")  // ours
	none(t, rec.deleted, "older watch after puts")
	dh2 := e.del("d/h2")
	if got := recv(t, rec.deleted, "older watch after the holder's delete"); got != dh2 {
		t.Fatalf("older watch fired at %d, want %d", got, dh2)
	}
}
