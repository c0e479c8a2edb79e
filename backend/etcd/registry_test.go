package etcd

import (
	"errors"
	"fmt"
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
			r := newRegistry(tm.mux)
			lost := make(lossRecorder, 2)
			e, err := r.add("claim", lost)
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
			if _, err := r.add("claim", nil); err != nil {
				t.Fatalf("add after the loss: %v", err)
			}
		})
	}
}

// A released claim is not reported when it goes, and only the release
// of its own token unregisters it.
func TestRegistryReleasedClaimIsSilent(t *testing.T) {
	tm := newTestMux(t)
	r := newRegistry(tm.mux)
	lost := make(lossRecorder, 1)
	e, _ := r.add("claim", lost)
	token := tm.e.put("claim")
	r.setToken(e, token)
	r.promote(e)
	tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the claim's watch")
	if r.removeClaim("claim", token-1) {
		t.Fatal("removeClaim with another token removed the claim")
	}
	if _, err := r.add("claim", nil); err == nil {
		t.Fatal("a second concurrent add of the same key succeeded")
	}
	if !r.removeClaim("claim", token) {
		t.Fatal("removeClaim of the claim's own token did nothing")
	}
	if r.removeClaim("claim", token) {
		t.Fatal("a second removeClaim reported success")
	}
	tm.e.del("claim")
	// A barrier on the same stream: once its delete is seen, the claim's
	// would have been.
	rev := tm.e.put("barrier")
	_, br := startWatch(t, tm, "barrier", rev+1)
	tm.e.del("barrier")
	recv(t, br.deleted, "barrier")
	none(t, lost, "OnLost after release")
	if _, err := r.add("claim", nil); err != nil {
		t.Fatalf("add after release: %v", err)
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
			eg, _ := r.add("gone", gone)
			ek, _ := r.add("kept", kept)
			tg := tm.e.put("gone")
			tk := tm.e.put("kept")
			tm.e.del("gone") // before either watch exists
			for _, x := range []struct {
				e     *entry
				token int64
			}{{eg, tg}, {ek, tk}} {
				r.setToken(x.e, x.token)
				r.promote(x.e)
			}
			if cause := recv(t, gone, "OnLost of the claim deleted in the gap"); !errors.Is(cause, backend.ErrLeaseExpired) {
				t.Fatalf("OnLost cause %v, want ErrLeaseExpired", cause)
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
