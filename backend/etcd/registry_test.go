package etcd

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
			r := newRegistry(tm.mux, nil)
			lost := make(lossRecorder, 2)
			r.holdDelay, r.waitDelay = 0, 0
			e := r.addOne("c/", 1, lost)
			r.setToken(e, tm.e.put(claimKey))
			if promoted {
				require.True(t, r.promote(e))
			} else {
				r.waiting(e)
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
			assert.Equal(t, claimKey, r.addOne("c/", 1, nil).key)
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
			r := newRegistry(tm.mux, nil)
			r.holdDelay = 0
			gone, kept := make(lossRecorder, 1), make(lossRecorder, 1)
			eg := r.addOne("gone/", 1, gone)
			ek := r.addOne("kept/", 1, kept)
			tg := tm.e.put(eg.key)
			tk := tm.e.put(ek.key)
			tm.e.del(eg.key) // before either watch exists
			// The loss may be found before the claim is handed out (then
			// Acquire fails) or after (then OnLost is called).
			r.setToken(eg, tg)
			if r.promote(eg) {
				if cause := recv(t, gone, "OnLost of the claim deleted in the gap"); !errors.Is(cause, backend.ErrLeaseExpired) {
					t.Fatalf("OnLost cause %v, want ErrLeaseExpired", cause)
				}
			} else {
				recv(t, eg.lost, "lost, for the claim deleted in the gap")
			}
			r.setToken(ek, tk)
			require.True(t, r.promote(ek), "the claim still there counted as lost")
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

// A claim is watched only once it has existed for the registry's delay: one
// released before then never costs a watch, and one that lives longer is
// watched from etcd's current revision, with a read covering its past.
func TestRegistryWatchStartsLate(t *testing.T) {
	t.Run("ReleasedYoung", func(t *testing.T) {
		tm := newTestMux(t)
		r := newRegistry(tm.mux, nil)
		r.holdDelay = time.Hour
		e := r.addOne("c/", 1, make(lossRecorder, 1))
		r.setToken(e, tm.e.put(claimKey))
		require.True(t, r.promote(e))
		r.end(e)
		assert.False(t, e.timer.Stop(), "the timer still ran after end")
		r.mature(e) // a timer that fired as end stopped it
		barrier(t, tm)
		for _, cr := range tm.e.creates(0) {
			assert.NotEqual(t, claimKey, string(cr.Key), "a watch created for a claim released young")
		}
	})
	t.Run("WaiterHandedOut", func(t *testing.T) {
		// A waiter's long wait clock gives way to the hold clock once the
		// claim is handed out.
		tm := newTestMux(t)
		r := newRegistry(tm.mux, nil)
		r.holdDelay, r.waitDelay = 0, time.Hour
		e := r.addOne("c/", 1, make(lossRecorder, 1))
		r.setToken(e, tm.e.put(claimKey))
		r.waiting(e)
		barrier(t, tm)
		for _, cr := range tm.e.creates(0) {
			assert.NotEqual(t, claimKey, string(cr.Key), "a watch created for a waiter within its wait delay")
		}
		require.True(t, r.promote(e))
		tm.e.waitFor(t, func() bool {
			for _, cr := range tm.e.createsLocked(0) {
				if string(cr.Key) == claimKey {
					return true
				}
			}
			return false
		}, "the claim's watch once held")
	})
	t.Run("Mature", func(t *testing.T) {
		tm := newTestMux(t)
		r := newRegistry(tm.mux, nil)
		lost := make(lossRecorder, 1)
		e := r.addOne("c/", 1, lost)
		r.holdDelay = 0
		r.setToken(e, tm.e.put(claimKey))
		require.True(t, r.promote(e))
		tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the claim's watch")
		assert.Zero(t, tm.e.creates(0)[0].StartRevision, "created at etcd's current revision")
		barrier(t, tm)
		none(t, lost, "OnLost while the claim is there")
		lostOnDelete(t, tm, claimKey, lost)
	})
}

// A claim's name stays taken from add until forget: concurrent claims of
// one lease on one key get distinct slots, a released claim is not reported
// when it goes, only the release of its own token finds it, and its name
// is free again only once forgotten (or its lease ended).
func TestRegistryNames(t *testing.T) {
	tm := newTestMux(t)
	r := newRegistry(tm.mux, nil)
	lost := make(lossRecorder, 1)
	e := r.addOne("c/", 1, lost)
	require.Equal(t, claimKey, e.key)
	second := r.addOne("c/", 1, nil)
	assert.Equal(t, "c/1-1", second.key, "a concurrent claim of the same lease")
	assert.Equal(t, "c/2", r.addOne("c/", 2, nil).key, "another lease's claim")
	r.forget(second)
	assert.Equal(t, "c/1-1", r.addOne("c/", 1, nil).key, "a forgotten name is used again")

	r.holdDelay = 0
	token := tm.e.put(claimKey)
	r.setToken(e, token)
	require.True(t, r.promote(e))
	tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the claim's watch")
	assert.Nil(t, r.held(claimKey, token-1), "held with another token")
	require.Same(t, e, r.held(claimKey, token))
	r.end(e)
	tm.e.del(claimKey)
	barrier(t, tm) // once its delete is seen, the claim's would have been
	none(t, lost, "OnLost after release")
	assert.Equal(t, "c/1-2", r.addOne("c/", 1, nil).key, "an ended claim's name is still taken")

	r.forgetLease(1)
	assert.Equal(t, claimKey, r.addOne("c/", 1, nil).key, "the name of an ended claim of an ended lease")
}

// A claim lost while its Release is under way - after the Release found it
// held, before it ended the entry - frees its name, which a new claim may
// take at once; end then reports the loss, so that Release does not delete
// by that name.
func TestRegistryEndAfterLoss(t *testing.T) {
	tm := newTestMux(t)
	r := newRegistry(tm.mux, nil)
	lost := make(lossRecorder, 1)
	e := r.addOne("c/", 1, lost)
	r.holdDelay = 0
	token := tm.e.put(claimKey)
	r.setToken(e, token)
	require.True(t, r.promote(e))
	tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the claim's watch")
	require.Same(t, e, r.held(claimKey, token), "what Release finds")
	lostOnDelete(t, tm, claimKey, lost)
	assert.Equal(t, claimKey, r.addOne("c/", 1, nil).key, "a new claim under the lost claim's name")
	assert.False(t, r.end(e), "end of the claim lost meanwhile")

	live := r.addOne("c/", 2, nil)
	assert.True(t, r.end(live), "end of a claim not lost")
}

// addOne registers a plain exclusive claim on one key, as add does.
func (r *registry) addOne(dir string, lease backend.LeaseID, onLost backend.LossListener) *entry {
	return r.add([]string{dir}, exclusive, lease, onLost)
}
