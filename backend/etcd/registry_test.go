package etcd

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// claimKey is the etcd key of the first claim of lease 1 in directory "c/".
const claimKey = "c/1"

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
			r := newRegistry(tm.mux)
			lost := make(lossRecorder, 2)
			e := r.add("c/", 1, lost)
			token := tm.e.put(claimKey)
			if !r.setToken(e, token) {
				t.Fatal("setToken reported a loss")
			}
			if promoted && !r.promote(e) {
				t.Fatal("promote failed")
			}
			tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the claim's watch")
			tm.e.del(claimKey)
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
			assert.Equal(t, claimKey, r.add("c/", 1, nil).key)
		})
	}
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
			r := newRegistry(tm.mux)
			gone, kept := make(lossRecorder, 1), make(lossRecorder, 1)
			eg := r.add("gone/", 1, gone)
			ek := r.add("kept/", 1, kept)
			tg := tm.e.put(eg.key)
			tk := tm.e.put(ek.key)
			tm.e.del(eg.key) // before either watch exists
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
			del := tm.e.del(ek.key)
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
	r := newRecTarget()
	// Created from rev+1, the watch is sent the delete even if it reaches
	// etcd after it, and only after etcd's answer to every earlier request
	// on the stream.
	tm.start(&keyWatch{key: key, from: rev + 1, target: r})
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
		r := newRegistry(tm.mux)
		lost := make(lossRecorder, 2)
		e := r.add("c/", 1, lost)
		r.watchEarly(e)
		return &setup{tm: tm, r: r, e: e, lost: lost}
	}
	// create makes the claim, tells the registry and hands it out; it
	// reports whether the claim was still there as far as it knew.
	create := func(x *setup) bool {
		x.token = x.tm.e.put(claimKey)
		return x.r.setToken(x.e, x.token) && x.r.promote(x.e)
	}
	// wantHeld checks that the claim is not reported lost until it is
	// deleted, and is then.
	wantHeld := func(t *testing.T, x *setup) {
		t.Helper()
		barrier(t, x.tm)
		none(t, x.lost, "OnLost while the claim is there")
		lostOnDelete(t, x.tm, claimKey, x.lost)
	}

	t.Run("EarlierIncarnationDeleted", func(t *testing.T) {
		x := early(t)
		x.tm.e.put(claimKey) // a name's earlier claim, deleted after our watch started
		barrier(t, x.tm)
		x.tm.e.del(claimKey)
		barrier(t, x.tm)
		if !create(x) {
			t.Fatal("the claim counted as lost by the delete of an earlier one")
		}
		wantHeld(t, x)
	})
	t.Run("DeletedBeforeTheTokenIsKnown", func(t *testing.T) {
		x := early(t)
		barrier(t, x.tm)
		token := x.tm.e.put(claimKey)
		x.tm.e.del(claimKey)
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
			r := newRegistry(tm.mux)
			barrier(t, tm) // the stream is up
			for _, gone := range []bool{false, true} {
				lost := make(lossRecorder, 2)
				e := r.add(fmt.Sprint("c-", gone, "/"), 1, lost)
				key := e.key
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
			x.token = x.tm.e.put(claimKey)
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
					if string(cr.Key) == claimKey {
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

// A claim's name stays taken from add until forget: concurrent claims of
// one lease on one key get distinct slots, a released claim is not reported
// when it goes, only the release of its own token finds it, and its name
// is free again only once forgotten (or its lease ended).
func TestRegistryNames(t *testing.T) {
	tm := newTestMux(t)
	r := newRegistry(tm.mux)
	lost := make(lossRecorder, 1)
	e := r.add("c/", 1, lost)
	require.Equal(t, claimKey, e.key)
	second := r.add("c/", 1, nil)
	assert.Equal(t, "c/1-1", second.key, "a concurrent claim of the same lease")
	assert.Equal(t, "c/2", r.add("c/", 2, nil).key, "another lease's claim")
	r.forget(second)
	assert.Equal(t, "c/1-1", r.add("c/", 1, nil).key, "a forgotten name is used again")

	token := tm.e.put(claimKey)
	require.True(t, r.setToken(e, token))
	require.True(t, r.promote(e))
	tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the claim's watch")
	assert.Nil(t, r.held(claimKey, token-1), "held with another token")
	require.Same(t, e, r.held(claimKey, token))
	r.end(e)
	tm.e.del(claimKey)
	barrier(t, tm) // once its delete is seen, the claim's would have been
	none(t, lost, "OnLost after release")
	assert.Equal(t, "c/1-2", r.add("c/", 1, nil).key, "an ended claim's name is still taken")

	r.forgetLease(1)
	assert.Equal(t, claimKey, r.add("c/", 1, nil).key, "the name of an ended claim of an ended lease")
}
