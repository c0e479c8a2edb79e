package etcd

import (
	"errors"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// newLateRegistry returns a registry whose timer never fires during a test
// (the tests call startLate themselves, as the timer would), and stops that
// timer when the test ends.
func newLateRegistry(t *testing.T, tm *testMux) *registry {
	r := newRegistry(tm.mux, time.Hour)
	t.Cleanup(r.closeLate)
	return r
}

// createsOf returns how many watches of key were created on tm's first
// stream.
func createsOf(tm *testMux, key string) int {
	n := 0
	for _, cr := range tm.e.creates(0) {
		if string(cr.Key) == key {
			n++
		}
	}
	return n
}

// A claim released before its turn comes costs no watch: nothing is created
// for it when it is released, nor when its generation's timer fires after.
func TestLateWatchSkipsAReleasedClaim(t *testing.T) {
	tm := newTestMux(t)
	r := newLateRegistry(t, tm)
	lost := make(lossRecorder, 1)
	e := heldClaim(tm, r, lost)
	ok, w := r.removeClaim(e.key, e.token)
	if !ok || w != nil {
		t.Fatalf("removeClaim = %v, %p; want the claim removed, with no watch to park", ok, w)
	}
	tm.e.del("claim")
	r.startLate()
	barrier(t, tm) // starts the stream if nothing else did
	if n := createsOf(tm, "claim"); n != 0 {
		t.Fatalf("%d watches created for a claim released before its delay", n)
	}
	none(t, lost, "OnLost of a released claim")
}

// A claim deleted before its watch starts is reported lost when it does:
// the watch starts at etcd's current revision and the read of the gap
// finds the claim gone. A claim of the same generation that is still there
// is not reported until its own delete.
func TestLateWatchFindsALossBeforeIt(t *testing.T) {
	tm := newTestMux(t)
	r := newLateRegistry(t, tm)
	gone, kept := make(lossRecorder, 1), make(lossRecorder, 1)
	eg, _ := r.add("gone", gone, nil)
	ek, _ := r.add("kept", kept, nil)
	for _, c := range []struct {
		e   *entry
		key string
	}{{eg, "gone"}, {ek, "kept"}} {
		if !r.setToken(c.e, tm.e.put(c.key)) || !r.promote(c.e) {
			t.Fatalf("%s counted as lost before its watch", c.key)
		}
	}
	tm.e.del("gone")
	barrier(t, tm)
	if n := createsOf(tm, "gone") + createsOf(tm, "kept"); n != 0 {
		t.Fatalf("%d claim watches created before the delay", n)
	}
	none(t, gone, "OnLost before the claim's watch starts")

	r.startLate()
	r.startLate() // kept came second: it is of the next generation
	if cause := recv(t, gone, "OnLost of the claim deleted before its watch"); !errors.Is(cause, backend.ErrLeaseExpired) {
		t.Fatalf("OnLost cause %v, want ErrLeaseExpired", cause)
	}
	for _, cr := range tm.e.creates(0) {
		if k := string(cr.Key); (k == "gone" || k == "kept") && cr.StartRevision != 0 {
			t.Fatalf("create %+v: want it at etcd's current revision (0)", cr)
		}
	}
	barrier(t, tm)
	none(t, kept, "OnLost of the claim still there")
	lostOnDelete(t, tm, "kept", kept)
}

// Claims deferred while the timer runs wait for the next generation: the
// first firing watches only the claims that started the timer, the second
// the ones deferred after.
func TestLateWatchGenerations(t *testing.T) {
	tm := newTestMux(t)
	r := newLateRegistry(t, tm)
	first, _ := r.add("first", nil, nil)
	r.setToken(first, tm.e.put("first"))
	second, _ := r.add("second", nil, nil)
	r.setToken(second, tm.e.put("second"))

	r.startLate()
	tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the first claim's watch")
	if createsOf(tm, "first") != 1 || createsOf(tm, "second") != 0 {
		t.Fatalf("after one firing: creates %v; want the first claim's alone", tm.e.creates(0))
	}
	r.startLate()
	tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 2 }, "the second claim's watch")
	if createsOf(tm, "second") != 1 {
		t.Fatalf("after two firings: creates %v; want the second claim's too", tm.e.creates(0))
	}
	// A claim that has a watch is left alone by later firings.
	r.startLate()
	barrier(t, tm)
	if n := createsOf(tm, "first") + createsOf(tm, "second"); n != 2 {
		t.Fatalf("%d claim watches after a third firing, want 2", n)
	}
	r.remove(first)
	r.remove(second)
}

// A watch started late is the claim's watch like any other: the release
// parks it, and the next claim under the name adopts it, with no create.
func TestLateWatchIsParkedAndReused(t *testing.T) {
	tm := newTestMux(t)
	r := newLateRegistry(t, tm)
	e := heldClaim(tm, r, make(lossRecorder, 1))
	r.startLate()
	tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the claim's watch")
	w := releaseParks(t, r, e)
	tm.e.del("claim")
	e2, next := nextClaimAdopts(t, tm, r, w)
	if n := createsOf(tm, "claim"); n != 1 {
		t.Fatalf("%d watches created for two claims under one name, want 1", n)
	}
	lostOnDelete(t, tm, e2.key, next)
}

// With a real delay, the Backend's timer starts the watch by itself, and
// closeLate stops it: nothing is watched late after it.
func TestLateWatchTimer(t *testing.T) {
	tm := newTestMux(t)
	r := newRegistry(tm.mux, time.Millisecond)
	t.Cleanup(r.closeLate)
	lost := make(lossRecorder, 1)
	heldClaim(tm, r, lost)
	tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the claim's watch, started by the timer")
	lostOnDelete(t, tm, "claim", lost)

	r.closeLate()
	after, _ := r.add("after", nil, nil)
	r.setToken(after, tm.e.put("after"))
	r.startLate() // as a firing that raced with closeLate would
	barrier(t, tm)
	if n := createsOf(tm, "after"); n != 0 {
		t.Fatalf("%d watches started after closeLate", n)
	}
	r.remove(after)
}

// A claim released young gives its name back without a watch: an early
// watch (a fresh name's) or an adopted one is stopped, not parked, so the
// next short hold under the name costs no watch traffic. A claim released
// once mature parks its watch.
func TestLateWatchYoungReleaseStopsTheWatch(t *testing.T) {
	for _, c := range []struct {
		name   string
		mature bool
	}{{"Young", false}, {"Mature", true}} {
		t.Run(c.name, func(t *testing.T) {
			tm := newTestMux(t)
			r := newLateRegistry(t, tm)
			if !r.watchesEarly(false) || r.watchesEarly(true) {
				t.Fatal("with a delay, a waiting claim should be watched early unless its name's last claim was short")
			}
			e, _ := r.add("claim", make(lossRecorder, 1), nil)
			r.watchEarly(e)
			r.setToken(e, tm.e.put("claim"))
			r.promote(e)
			tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the early watch")
			if c.mature {
				r.startLate()
			}
			ok, w := r.removeClaim(e.key, e.token)
			if !ok {
				t.Fatal("removeClaim did nothing")
			}
			if c.mature {
				if w == nil {
					t.Fatal("a mature claim's watch was not parked")
				}
				tm.mux.stop(w)
				return
			}
			if w != nil {
				t.Fatalf("a young claim's watch was parked (%p), want it stopped", w)
			}
			tm.e.waitFor(t, func() bool { return len(tm.e.cancelsLocked(0)) == 1 }, "the young claim's watch cancelled")
			if n := createsOf(tm, "claim"); n != 1 {
				t.Fatalf("%d watches created, want the early one alone", n)
			}
		})
	}
}

// Without a delay every waiting claim is watched early, fresh name or not.
func TestNoDelayWatchesEarly(t *testing.T) {
	r := newRegistry(newTestMux(t).mux, 0)
	if !r.watchesEarly(true) || !r.watchesEarly(false) {
		t.Fatal("without a delay, every waiting claim should be watched early")
	}
}
