package etcd

import (
	"errors"
	"testing"

	"github.com/ash-lock/ashlock/backend"
)

// The registry decides "lost" from two facts that arrive in any order:
// the claim's create revision (token) and revisions at which its key was
// seen absent. A claim is lost iff the key was absent at some revision >=
// its token.
func TestRegistryLossDecision(t *testing.T) {
	type step struct {
		op  string // "token", "absent", "promote"
		rev int64
	}
	tests := []struct {
		name       string
		steps      []step
		wantLost   bool
		wantOnLost int
	}{
		{"absent before creation is an older incarnation", []step{{"absent", 5}, {"token", 10}, {"promote", 0}}, false, 0},
		{"absent after creation, seen before the token", []step{{"absent", 12}, {"token", 10}}, true, 0},
		{"absent after creation, seen after the token", []step{{"token", 10}, {"absent", 12}}, true, 0},
		{"holder loses its claim", []step{{"token", 10}, {"promote", 0}, {"absent", 11}}, true, 1},
		{"repeated absence reports once", []step{{"token", 10}, {"promote", 0}, {"absent", 11}, {"absent", 13}}, true, 1},
		{"recheck at the token's own revision", []step{{"absent", 10}, {"token", 10}}, true, 0},
		{"nothing happens", []step{{"token", 10}, {"promote", 0}}, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRegistry()
			calls := 0
			var cause error
			e, err := r.add("k", backend.LossFunc(func(c error) { calls++; cause = c }))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.steps {
				switch s.op {
				case "token":
					r.setToken(e, s.rev)
				case "absent":
					if fn := r.observeAbsent("k", s.rev); fn != nil {
						fn()
					}
				case "promote":
					r.promote(e)
				}
			}
			lost := false
			select {
			case <-e.lost:
				lost = true
			default:
			}
			if lost != tt.wantLost || calls != tt.wantOnLost {
				t.Fatalf("lost=%v OnLost calls=%d; want lost=%v calls=%d", lost, calls, tt.wantLost, tt.wantOnLost)
			}
			if calls > 0 && !errors.Is(cause, backend.ErrLeaseExpired) {
				t.Fatalf("OnLost cause %v does not wrap ErrLeaseExpired", cause)
			}
		})
	}
}

func TestRegistryPromoteFailsOnceLost(t *testing.T) {
	r := newRegistry()
	e, _ := r.add("k", backend.LossFunc(func(error) { t.Error("OnLost called for a claim never handed out") }))
	if !r.setToken(e, 10) {
		t.Fatal("setToken reported a loss")
	}
	if fn := r.observeAbsent("k", 11); fn != nil {
		fn()
	}
	if r.promote(e) {
		t.Fatal("promote succeeded for a lost claim")
	}
	// The key is free for a retry with the same ID once the loss is known.
	if _, err := r.add("k", nil); err != nil {
		t.Fatalf("re-adding the key after its loss: %v", err)
	}
}

func TestRegistryReleasedClaimIsSilent(t *testing.T) {
	r := newRegistry()
	e, _ := r.add("k", backend.LossFunc(func(error) { t.Error("OnLost called after release") }))
	r.setToken(e, 10)
	r.promote(e)
	r.removeClaim("k", 9) // another token: not ours to remove
	if len(r.snapshot()) != 1 {
		t.Fatal("removeClaim with a different token removed the entry")
	}
	r.removeClaim("k", 10)
	if fn := r.observeAbsent("k", 11); fn != nil {
		fn()
	}
	if _, err := r.add("k", nil); err != nil {
		t.Fatalf("add after release: %v", err)
	}
	if _, err := r.add("k", nil); err == nil {
		t.Fatal("a second concurrent add of the same key succeeded")
	}
}
