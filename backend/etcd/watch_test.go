package etcd

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// startWatch starts a watch of key from from on tm and waits until the
// mux has etcd's answer.
func startWatch(t *testing.T, tm *testMux, key string, from int64) (*keyWatch, *recTarget) {
	t.Helper()
	r := newRecTarget()
	w := &keyWatch{key: key, from: from, target: r}
	tm.start(w)
	barrier(t, tm)
	none(t, r.failed, "watch of "+key)
	return w, r
}

// Every watch is a single-key, delete-only watch with an ID of its own on
// one shared stream, and a delete reaches the watch of its key only.
func TestMuxDispatchesByID(t *testing.T) {
	tm := newTestMux(t)
	tm.e.put("a")
	tm.e.put("b")
	rev := tm.e.put("c")
	_, ra := startWatch(t, tm, "a", rev+1)
	_, rb := startWatch(t, tm, "b", rev+1)
	_, rc := startWatch(t, tm, "c", rev+1)

	del := tm.e.del("b")
	if got := recv(t, rb.deleted, "delete of b"); got != del {
		t.Fatalf("b deleted at %d, want %d", got, del)
	}
	none(t, ra.deleted, "a after b's delete")
	none(t, rc.deleted, "c after b's delete")

	if n := tm.e.streamCount(); n != 1 {
		t.Fatalf("%d streams opened, want 1", n)
	}
	var ids []int64
	var bID int64
	for _, cr := range tm.e.creates(0) {
		if len(cr.RangeEnd) != 0 || !slices.Equal(cr.Filters, noPut) || cr.WatchId <= 0 {
			t.Fatalf("create %+v: want one key, deletes only, an ID of ours", cr)
		}
		ids = append(ids, cr.WatchId)
		if string(cr.Key) == "b" {
			bID = cr.WatchId
		}
	}
	n := len(ids)
	slices.Sort(ids)
	require.Len(t, slices.Compact(ids), n, "watch IDs are distinct")
	// The watch that fired is cancelled on etcd too.
	tm.e.waitFor(t, func() bool { return slices.Contains(tm.e.cancelsLocked(0), bID) }, "the cancel of b's watch")
}

// A watch started "now" is created at etcd's current revision, and the
// deletes between its resume revision and that one are settled by a read;
// one started at its resume revision needs none.
func TestMuxStartsNow(t *testing.T) {
	tm := newTestMux(t)
	k := tm.e.put("k")
	tm.e.put("other")
	startWatch(t, tm, "k", k+1)
	assert.Zero(t, tm.e.readCount(), "reads for a watch from its resume revision")
	w := &keyWatch{key: "k", from: k + 1, now: true, target: newRecTarget()}
	tm.start(w)
	tm.e.waitFor(t, func() bool { return tm.e.reads == 1 }, "the read of the gap")
	creates := tm.e.creates(0)
	assert.Zero(t, creates[len(creates)-1].StartRevision, "the start-now watch's StartRevision")
}

// etcd answers a refused create with ID -1; the mux pairs answers with
// creates in send order, fails the refused watch alone, and reopens the
// stream when the cause is an expired auth token.
func TestMuxRefusedCreate(t *testing.T) {
	tm := newTestMux(t)
	tm.e.put("good1")
	tm.e.put("bad")
	rev := tm.e.put("good2")
	_, r1 := startWatch(t, tm, "good1", rev+1)
	tm.e.refuseKey("bad", rpctypes.ErrGRPCPermissionDenied.Error())
	tm.e.hold() // answer the three creates together
	rb, r2 := newRecTarget(), newRecTarget()
	tm.start(&keyWatch{key: "bad", from: rev + 1, target: rb})
	tm.start(&keyWatch{key: "good2", from: rev + 5, target: r2})
	tm.e.release()
	if err := recv(t, rb.failed, "refused watch"); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("refused watch failed with %v, want ErrUnavailable", err)
	}
	barrier(t, tm)
	none(t, r2.failed, "good2: answers paired with the wrong creates")
	none(t, r1.failed, "good1")

	// An expired token: a new stream, and every live watch on it again.
	tm.e.refuseKey("late", rpctypes.ErrGRPCInvalidAuthToken.Error())
	rl := newRecTarget()
	tm.start(&keyWatch{key: "late", from: rev + 1, target: rl})
	tm.e.waitFor(t, func() bool {
		return slices.ContainsFunc(tm.e.createsLocked(0), func(cr *pb.WatchCreateRequest) bool { return string(cr.Key) == "late" })
	}, "the create of late")
	tm.e.allowKey("late") // the next stream has a fresh token
	tm.e.waitFor(t, func() bool { return len(tm.e.streams) == 2 && len(tm.e.createsLocked(1)) == 3 }, "every live watch on the new stream")
	barrier(t, tm)
	none(t, rl.failed, "watch refused for its token")
	if n := tm.e.streamCount(); n != 2 {
		t.Fatalf("%d streams opened, want 2", n)
	}
}

// A delete that crosses a watch's cancel on the wire is dropped.
func TestMuxDropsEventsAfterStop(t *testing.T) {
	tm := newTestMux(t)
	rev := tm.e.put("k")
	w, r := startWatch(t, tm, "k", rev+1)
	_, other := startWatch(t, tm, "other", rev+1)
	tm.e.hold()
	tm.e.del("k") // its event is on the wire ...
	tm.stop(w)    // ... when the cancel leaves
	tm.e.release()
	// A later event on the same stream, as a barrier: once it is seen,
	// the one before it has been handled.
	tm.e.del("other")
	recv(t, other.deleted, "barrier")
	none(t, r.deleted, "stopped watch")
}

// When the stream breaks, every live watch is created again on a new one
// from its resume revision, and deletes made meanwhile are delivered.
func TestMuxRecreatesAfterBreak(t *testing.T) {
	tm := newTestMux(t)
	tm.e.put("a")
	rev := tm.e.put("b")
	_, ra := startWatch(t, tm, "a", rev+1)
	rb := newRecTarget()
	tm.start(&keyWatch{key: "b", from: rev + 1, target: rb})
	barrier(t, tm)

	tm.e.setOpenErr(errors.New("fake: down"))
	tm.e.breakStream()
	da, db := tm.e.del("a"), tm.e.del("b")
	tm.e.setOpenErr(nil)
	if got := recv(t, ra.deleted, "a"); got != da {
		t.Fatalf("a deleted at %d, want %d", got, da)
	}
	if got := recv(t, rb.deleted, "b"); got != db {
		t.Fatalf("b deleted at %d, want %d", got, db)
	}
	starts := map[string]int64{}
	for _, cr := range tm.e.creates(1) {
		starts[string(cr.Key)] = cr.StartRevision
	}
	assert.Equal(t, map[string]int64{"a": rev + 1, "b": rev + 1}, starts, "re-created from the resume revisions (never 0)")
}

// A watch whose resume revision was compacted is checked with a read: gone
// if its key is absent or re-created, else watched again from after the
// read.
func TestMuxCompactedWatch(t *testing.T) {
	tm := newTestMux(t)
	tm.e.put("gone")
	tm.e.put("same")
	rev := tm.e.put("replaced")
	targets := map[string]*recTarget{}
	for _, k := range []string{"gone", "same", "replaced"} {
		_, targets[k] = startWatch(t, tm, k, rev+1)
	}
	tm.e.setOpenErr(errors.New("fake: down"))
	tm.e.breakStream()
	tm.e.del("gone")
	tm.e.del("replaced")
	tm.e.put("replaced")
	compacted := tm.e.compactNow()
	tm.e.setOpenErr(nil)

	for _, k := range []string{"gone", "replaced"} {
		if got := recv(t, targets[k].deleted, k); got < compacted {
			t.Fatalf("%s reported gone at %d, before the compaction at %d", k, got, compacted)
		}
	}
	// etcd first accepts the create from the old revision, then drops it.
	tm.e.waitFor(t, func() bool {
		return slices.ContainsFunc(tm.e.createsLocked(1), func(cr *pb.WatchCreateRequest) bool {
			return string(cr.Key) == "same" && cr.StartRevision == compacted+1
		})
	}, "same watched again from after the read")
	barrier(t, tm)
	none(t, targets["same"].deleted, "same")
	del := tm.e.del("same")
	if got := recv(t, targets["same"].deleted, "same"); got != del {
		t.Fatalf("same deleted at %d, want %d", got, del)
	}
}

// A read that fails is retried: the check does not give up on a watch.
func TestMuxCheckRetries(t *testing.T) {
	tm := newTestMux(t)
	rev := tm.e.put("k")
	_, r := startWatch(t, tm, "k", rev+1)
	tm.e.mu.Lock()
	tm.e.readErr = errors.New("fake: read failed")
	tm.e.mu.Unlock()
	tm.e.setOpenErr(errors.New("fake: down"))
	tm.e.breakStream()
	tm.e.del("k")
	tm.e.compactNow()
	tm.e.setOpenErr(nil)
	tm.e.waitFor(t, func() bool { return tm.e.reads >= 2 }, "two failed reads")
	none(t, r.deleted, "k while reads fail")
	tm.e.mu.Lock()
	tm.e.readErr = nil
	tm.e.mu.Unlock()
	recv(t, r.deleted, "k once a read succeeds")
}

// Ten thousand watches cost no goroutine each.
func TestMuxManyWatchesNoGoroutines(t *testing.T) {
	const n = 10000
	tm := newTestMux(t)
	rev := tm.e.put("warm-up")
	startWatch(t, tm, "warm-up", rev+1) // starts the mux's goroutines
	before := runtime.NumGoroutine()
	r := newRecTarget()
	for i := range n {
		tm.start(&keyWatch{key: fmt.Sprint("k", i), from: rev + 1, target: r})
	}
	tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == n+2 }, "every create")
	barrier(t, tm)
	if grew := runtime.NumGoroutine() - before; grew > 0 {
		t.Fatalf("%d watches added %d goroutines", n, grew)
	}
}

// Once the etcd client is closed, every watch fails, and so does every
// later one, at once.
func TestMuxClientClosed(t *testing.T) {
	tm := newTestMux(t)
	rev := tm.e.put("k")
	_, r := startWatch(t, tm, "k", rev+1)
	tm.closeClient()
	tm.e.setOpenErr(errors.New("fake: client closed"))
	tm.e.breakStream()
	if err := recv(t, r.failed, "watch"); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("watch failed with %v, want ErrUnavailable", err)
	}
	later := newRecTarget()
	tm.start(&keyWatch{key: "k", from: rev + 1, target: later})
	if err := recv(t, later.failed, "later watch"); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("later watch failed with %v, want ErrUnavailable", err)
	}
}

// The gRPC stream is what the mux opens in production.
var _ watchStream = pb.Watch_WatchClient(nil)

// A watch of puts (a counted waiter's watch of its predecessor) fires on
// the first rewrite of its key as well as on its delete, and asks etcd for
// puts; a delete watch ignores rewrites.
func TestMuxWatchOfPuts(t *testing.T) {
	tm := newTestMux(t)
	rev := tm.e.put("p")
	tm.e.put("d")
	rp := newRecTarget()
	wp := &keyWatch{key: "p", from: rev + 2, target: rp, puts: true}
	tm.start(wp)
	_, rd := startWatch(t, tm, "d", rev+2)
	barrier(t, tm)
	tm.e.rewrite("d")
	put := tm.e.rewrite("p")
	if got := recv(t, rp.deleted, "rewrite of p"); got != put {
		t.Fatalf("p's watch fired at %d, want the rewrite at %d", got, put)
	}
	barrier(t, tm)
	none(t, rd.deleted, "d's delete watch after a rewrite of d")
	for _, cr := range tm.e.creates(0) {
		switch string(cr.Key) {
		case "p":
			assert.Empty(t, cr.Filters, "a watch of puts filters nothing")
		case "d":
			assert.Equal(t, noPut, cr.Filters)
		}
	}
	del := tm.e.del("d")
	assert.Equal(t, del, recv(t, rd.deleted, "delete of d"))
}

// A stream whose creates etcd keeps refusing for an expired auth token is
// opened again with growing pauses (backend.MinBackoff, doubled up to backend.MaxBackoff),
// not at every backend.MinBackoff: such a refusal is no sign that streams work.
func TestMuxRefusedStreamsBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newTestMux(t)
		tm.e.refuseKey("k", rpctypes.ErrGRPCInvalidAuthToken.Error())
		tm.start(&keyWatch{key: "k", from: tm.e.put("k") + 1, target: newRecTarget()})
		const window = 3 * time.Second
		time.Sleep(window)
		synctest.Wait()
		// 50+100+200+400+800 ms, then one a second: 7 streams in 3 s.
		want := 0
		for d, b := time.Duration(0), backend.MinBackoff; d <= window; d, b = d+b, min(2*b, backend.MaxBackoff) {
			want++
		}
		assert.Equal(t, want, tm.e.streamCount(), "streams opened in %v", window)
		tm.e.allowKey("k")
	})
}
