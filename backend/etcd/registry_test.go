package etcd

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ash-lock/ashlock/backend"
)

// lossRecorder counts OnLost calls.
type lossRecorder chan error

func (l lossRecorder) ClaimLost(cause error) { l <- cause }

// A claim's watch starts right after its creation; a delete reports the
// loss to a holder once, and to a claim not yet handed out only by closing
// lost (Acquire then fails instead of returning it).
func TestRegistryReportsLoss(t *testing.T) {
	for _, promoted := range []bool{true, false} {
		name := "Holder"
		if !promoted {
			name = "NotYetHandedOut"
		}
		t.Run(name, func(t *testing.T) {
			tm := newTestMux(t)
			r := newRegistry(tm.mux, 0)
			lost := make(lossRecorder, 2)
			e, err := r.add("claim", lost, nil)
			if err != nil {
				t.Fatal(err)
			}
			token := tm.e.put("claim")
			if !r.setToken(e, token) {
				t.Fatal("setToken reported a loss")
			}
			if promoted && !r.promote(e) {
				t.Fatal("promote failed")
			}
			tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the claim's watch")
			tm.e.del("claim")
			recv(t, e.lost, "lost closed")
			if promoted {
				if cause := recv(t, lost, "OnLost"); !errors.Is(cause, backend.ErrLeaseExpired) {
					t.Fatalf("OnLost cause %v, want ErrLeaseExpired", cause)
				}
			} else if r.promote(e) {
				t.Fatal("promote succeeded for a lost claim")
			}
			none(t, lost, "a second OnLost, or one for a claim not handed out")
			// The name is free for another acquisition once the loss is known.
			if _, err := r.add("claim", nil, nil); err != nil {
				t.Fatalf("add after the loss: %v", err)
			}
		})
	}
}

// A released claim is not reported when it goes, and only the release
// of its own token unregisters it.
func TestRegistryReleasedClaimIsSilent(t *testing.T) {
	tm := newTestMux(t)
	r := newRegistry(tm.mux, 0)
	lost := make(lossRecorder, 1)
	e, _ := r.add("claim", lost, nil)
	token := tm.e.put("claim")
	r.setToken(e, token)
	r.promote(e)
	tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the claim's watch")
	if ok, _ := r.removeClaim("claim", token-1); ok {
		t.Fatal("removeClaim with another token removed the claim")
	}
	if _, err := r.add("claim", nil, nil); err == nil {
		t.Fatal("a second concurrent add of the same key succeeded")
	}
	ok, w := r.removeClaim("claim", token)
	if !ok {
		t.Fatal("removeClaim of the claim's own token did nothing")
	}
	if w == nil {
		t.Fatal("the released claim's live watch was not parked")
	}
	if again, _ := r.removeClaim("claim", token); again {
		t.Fatal("a second removeClaim reported success")
	}
	tm.e.del("claim")
	// A barrier on the same stream: once its delete is seen, the claim's
	// would have been.
	barrier(t, tm)
	none(t, lost, "OnLost after release")
	e2, err := r.add("claim", nil, nil)
	if err != nil {
		t.Fatalf("add after release: %v", err)
	}
	r.remove(e2)
	tm.mux.stop(w)
}

// A released claim's watch, parked with its name, serves the next claim
// under that name: the release's delete, seen while parked, is not that
// claim's loss, the new claim's own delete is, and no watch is created or
// cancelled for it.
func TestRegistryParkedWatchServesTheNextClaim(t *testing.T) {
	for _, delSeen := range []bool{true, false} {
		t.Run(fmt.Sprintf("releaseDeleteSeenFirst=%v", delSeen), func(t *testing.T) {
			tm := newTestMux(t)
			r := newRegistry(tm.mux, 0)
			first := make(lossRecorder, 1)
			e := heldClaim(tm, r, first)
			tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the claim's watch")
			w := releaseParks(t, r, e)
			tm.e.del("claim") // the release
			if delSeen {
				barrier(t, tm)
			}

			_, next := nextClaimAdopts(t, tm, r, w)
			none(t, first, "OnLost of the released claim")
			tm.mux.mu.Lock()
			id := w.id
			tm.mux.mu.Unlock()
			tm.e.mu.Lock()
			creates := 0
			for _, cr := range tm.e.createsLocked(0) {
				if string(cr.Key) == "claim" {
					creates++
				}
			}
			cancelled := slices.Contains(tm.e.cancelsLocked(0), id)
			tm.e.mu.Unlock()
			if creates != 1 || cancelled {
				t.Fatalf("%d watches created on the claim's name, and cancelled: %v; want 1 serving both claims, live", creates, cancelled)
			}
			lostOnDelete(t, tm, "claim", next)
		})
	}
}

// heldClaim registers "claim", creates it in tm's etcd and hands it out,
// as an Acquire does; lost hears its loss.
func heldClaim(tm *testMux, r *registry, lost lossRecorder) *entry {
	e, _ := r.add("claim", lost, nil)
	r.setToken(e, tm.e.put("claim"))
	r.promote(e)
	return e
}

// releaseParks unregisters e as Release does and returns its parked watch.
func releaseParks(t *testing.T, r *registry, e *entry) *keyWatch {
	t.Helper()
	ok, w := r.removeClaim(e.key, e.token)
	if !ok || w == nil {
		t.Fatalf("removeClaim = %v, %p; want the watch parked", ok, w)
	}
	return w
}

// nextClaimAdopts registers the next claim under the name with the parked
// watch w, creates it and hands it out, and checks that nothing reports it
// lost while it is there. OnLost of the new claim goes to the result.
func nextClaimAdopts(t *testing.T, tm *testMux, r *registry, w *keyWatch) (*entry, lossRecorder) {
	t.Helper()
	next := make(lossRecorder, 1)
	e, err := r.add("claim", next, w)
	if err != nil {
		t.Fatal(err)
	}
	if !r.setToken(e, tm.e.put("claim")) || !r.promote(e) {
		t.Fatal("the next claim counted as lost by the release of the one before")
	}
	barrier(t, tm)
	none(t, next, "OnLost while the next claim is there")
	return e, next
}

// lostOnDelete deletes key and checks that lost hears of it, naming the
// delete's revision.
func lostOnDelete(t *testing.T, tm *testMux, key string, lost lossRecorder) {
	t.Helper()
	del := tm.e.del(key)
	cause := recv(t, lost, "OnLost after the delete")
	if want := fmt.Sprintf("revision %d", del); !strings.Contains(cause.Error(), want) {
		t.Fatalf("OnLost: %v; want it to name the delete at %s", cause, want)
	}
}

// A claim deleted after its creation but before its watch reaches etcd is
// reported too, by the read that closes the watch's gap; one untouched in
// the gap is not, and its later delete is.
func TestRegistryLossBeforeTheWatch(t *testing.T) {
	for _, lagging := range []bool{false, true} {
		name := "ReadAtTheWatchRevision"
		if lagging {
			name = "MemberBehindReadsThePresent"
		}
		t.Run(name, func(t *testing.T) {
			tm := newTestMux(t)
			tm.e.setLagging(lagging)
			r := newRegistry(tm.mux, 0)
			gone, kept := make(lossRecorder, 1), make(lossRecorder, 1)
			eg, _ := r.add("gone", gone, nil)
			ek, _ := r.add("kept", kept, nil)
			tg := tm.e.put("gone")
			tk := tm.e.put("kept")
			tm.e.del("gone") // before either watch exists
			// The loss may be found before the claim is handed out (then
			// Acquire fails) or after (then OnLost is called).
			if r.setToken(eg, tg) && r.promote(eg) {
				if cause := recv(t, gone, "OnLost of the claim deleted in the gap"); !errors.Is(cause, backend.ErrLeaseExpired) {
					t.Fatalf("OnLost cause %v, want ErrLeaseExpired", cause)
				}
			} else {
				recv(t, eg.lost, "lost, for the claim deleted in the gap")
			}
			if !r.setToken(ek, tk) || !r.promote(ek) {
				t.Fatal("the claim still there counted as lost")
			}
			// An OnLost for kept before its delete would name an earlier
			// revision, and would be the only one.
			del := tm.e.del("kept")
			cause := recv(t, kept, "OnLost after the later delete")
			if want := fmt.Sprintf("revision %d", del); !strings.Contains(cause.Error(), want) {
				t.Fatalf("OnLost of kept: %v; want it to be the delete at %s", cause, want)
			}
			for _, cr := range tm.e.creates(0) {
				if cr.StartRevision != 0 {
					t.Fatalf("create %+v: want it at etcd's current revision (0)", cr)
				}
			}
		})
	}
}

// barrier returns once every response etcd sent on the current stream
// before it has been dispatched: it watches a key of its own and deletes
// it, and responses on one stream arrive in order.
func barrier(t *testing.T, tm *testMux) {
	t.Helper()
	key := fmt.Sprint("barrier-", tm.e.put("barrier-seq"))
	rev := tm.e.put(key)
	_, r := startWatch(t, tm, key, rev+1)
	tm.e.del(key)
	recv(t, r.deleted, "barrier")
}

// A waiting Acquire's watch starts before its claim exists, so that it
// normally covers the claim's whole life without a read; until the claim's
// create revision is known, the deletes it sees are only remembered.
func TestRegistryEarlyWatch(t *testing.T) {
	type setup struct {
		tm    *testMux
		r     *registry
		e     *entry
		lost  lossRecorder
		token int64
	}
	early := func(t *testing.T) *setup {
		tm := newTestMux(t)
		r := newRegistry(tm.mux, 0)
		lost := make(lossRecorder, 2)
		e, err := r.add("claim", lost, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.watchEarly(e)
		return &setup{tm: tm, r: r, e: e, lost: lost}
	}
	// create makes the claim, tells the registry and hands it out; it
	// reports whether the claim was still there as far as it knew.
	create := func(x *setup) bool {
		x.token = x.tm.e.put("claim")
		return x.r.setToken(x.e, x.token) && x.r.promote(x.e)
	}
	// wantHeld checks that the claim is not reported lost until it is
	// deleted, and is then.
	wantHeld := func(t *testing.T, x *setup) {
		t.Helper()
		barrier(t, x.tm)
		none(t, x.lost, "OnLost while the claim is there")
		lostOnDelete(t, x.tm, "claim", x.lost)
	}

	t.Run("EarlierIncarnationDeleted", func(t *testing.T) {
		x := early(t)
		x.tm.e.put("claim") // a name's earlier claim, deleted after our watch started
		barrier(t, x.tm)
		x.tm.e.del("claim")
		barrier(t, x.tm)
		if !create(x) {
			t.Fatal("the claim counted as lost by the delete of an earlier one")
		}
		wantHeld(t, x)
	})
	t.Run("DeletedBeforeTheTokenIsKnown", func(t *testing.T) {
		x := early(t)
		barrier(t, x.tm)
		token := x.tm.e.put("claim")
		x.tm.e.del("claim")
		barrier(t, x.tm)
		if x.r.setToken(x.e, token) {
			t.Fatal("setToken of a claim already seen deleted reported it there")
		}
		recv(t, x.e.lost, "lost")
		if x.r.promote(x.e) {
			t.Fatal("promote succeeded")
		}
	})
	t.Run("CoversTheClaimWithoutARead", func(t *testing.T) {
		x := early(t)
		barrier(t, x.tm)
		reads := x.tm.e.readCount()
		if !create(x) {
			t.Fatal("claim lost")
		}
		wantHeld(t, x)
		if n := x.tm.e.readCount(); n != reads {
			t.Fatalf("%d reads for a watch that was there before its claim, want none", n-reads)
		}
	})
	for _, ackFirst := range []bool{true, false} {
		name := "TokenKnownFirst"
		if ackFirst {
			name = "WatchConfirmedFirst"
		}
		t.Run("LostTheRace/"+name, func(t *testing.T) {
			tm := newTestMux(t)
			r := newRegistry(tm.mux, 0)
			barrier(t, tm) // the stream is up
			for _, gone := range []bool{false, true} {
				key := fmt.Sprint("claim-", gone)
				lost := make(lossRecorder, 2)
				e, _ := r.add(key, lost, nil)
				token := tm.e.put(key) // created before the watch reaches etcd
				if gone {
					tm.e.del(key)
				} else {
					tm.e.put("other")
				}
				if !ackFirst {
					tm.e.hold()
				}
				r.watchEarly(e)
				if ackFirst {
					barrier(t, tm)
				}
				r.setToken(e, token)
				r.promote(e)
				tm.e.release()
				if gone {
					recv(t, e.lost, "lost, by the read of the gap")
					continue
				}
				barrier(t, tm)
				none(t, lost, "OnLost of a claim still there")
				tm.e.del(key)
				recv(t, lost, "OnLost after the delete")
			}
		})
	}
	t.Run("StreamBrokenBeforeTheToken", func(t *testing.T) {
		for _, compacted := range []bool{false, true} {
			x := early(t)
			barrier(t, x.tm)
			x.tm.e.setOpenErr(errors.New("fake: down"))
			x.tm.e.breakStream()
			x.token = x.tm.e.put("claim")
			if compacted {
				x.tm.e.compactNow()
			}
			x.tm.e.setOpenErr(nil)
			x.tm.e.waitFor(t, func() bool { return len(x.tm.e.streams) == 2 }, "the stream again")
			// Created again where the first stream had confirmed it; if
			// that was compacted away, then at etcd's current revision.
			want := 1
			if compacted {
				want = 2
			}
			var starts []int64
			x.tm.e.waitFor(t, func() bool {
				starts = starts[:0]
				for _, cr := range x.tm.e.createsLocked(1) {
					if string(cr.Key) == "claim" {
						starts = append(starts, cr.StartRevision)
					}
				}
				return len(starts) >= want
			}, "the claim's watch on the new stream")
			if len(starts) != want || starts[0] == 0 || (compacted && starts[1] != 0) {
				t.Fatalf("compacted=%v: re-created with start revisions %v", compacted, starts)
			}
			barrier(t, x.tm)
			if !x.r.setToken(x.e, x.token) || !x.r.promote(x.e) {
				t.Fatal("claim lost")
			}
			wantHeld(t, x)
		}
	})
}

// A parked watch lives through its stream's loss, even with its start
// revision compacted meanwhile: it is created again on the next stream
// (where it had been confirmed, or at etcd's current revision), and the
// claim that adopts it afterwards is neither taken for lost by the
// release's delete nor missed when it goes itself.
func TestRegistryParkedWatchOutlivesTheStream(t *testing.T) {
	for _, compacted := range []bool{false, true} {
		t.Run(fmt.Sprintf("compacted=%v", compacted), func(t *testing.T) {
			tm := newTestMux(t)
			r := newRegistry(tm.mux, 0)
			e := heldClaim(tm, r, make(lossRecorder, 1))
			barrier(t, tm)
			w := releaseParks(t, r, e)

			tm.e.setOpenErr(errors.New("fake: down"))
			tm.e.breakStream()
			tm.e.del("claim") // the release, while the stream is down
			if compacted {
				tm.e.put("filler")
				tm.e.compactNow()
			}
			tm.e.setOpenErr(nil)
			tm.e.waitFor(t, func() bool {
				for _, cr := range tm.e.createsLocked(1) {
					if string(cr.Key) == "claim" {
						return true
					}
				}
				return false
			}, "the parked watch on the new stream")
			barrier(t, tm)

			e2, next := nextClaimAdopts(t, tm, r, w)
			if e2.watch != w {
				t.Fatal("the next claim did not adopt the parked watch")
			}
			lostOnDelete(t, tm, "claim", next)
		})
	}
}
