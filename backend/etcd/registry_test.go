package etcd

import (
	"errors"
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
			if start := tm.e.creates(0)[0].StartRevision; start != token+1 {
				t.Fatalf("claim created at %d watched from %d, want %d", token, start, token+1)
			}
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
