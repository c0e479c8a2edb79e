package etcdbackend_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// lossBound is how soon OnLost must follow the loss in these tests. The
// target is < 100ms; the bound is looser for a loaded CI machine under the
// race detector, and still far below the 30s lease that renewal-based
// detection would need.
const lossBound = 2 * time.Second

// A holder learns from its claim's watch, not from renewals, that its claim
// is gone: its lease revoked, or the claim deleted by an operator.
func TestLossFiresOnLost(t *testing.T) {
	tests := []struct {
		name string
		lose func(t *testing.T, b *etcd.Backend, cli *clientv3.Client, c backend.Claim)
	}{
		{"LeaseRevoked", func(t *testing.T, b *etcd.Backend, _ *clientv3.Client, c backend.Claim) {
			if err := b.Revoke(testCtx(t, waitBound), c.Lease); err != nil {
				t.Fatal(err)
			}
		}},
		{"OperatorDelete", func(t *testing.T, b *etcd.Backend, cli *clientv3.Client, c backend.Claim) {
			resp, err := cli.Delete(testCtx(t, waitBound), b.ClaimKey(c))
			if err != nil || resp.Deleted != 1 {
				t.Fatalf("delete %s: %v (%d deleted)", b.ClaimKey(c), err, resp.Deleted)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			b, _ := newBackend(t, shared, prefix)
			operator := shared.Client(t)
			l := grant(t, b, 30*time.Second)
			lost, other := newLostSignal(), newLostSignal()
			r := request("held", l, "H")
			r.OnLost = backend.LossFunc(lost.onLost)
			c := acquire(t, b, r)
			// A claim on another lease, untouched by the loss.
			r2 := request("other", grant(t, b, 30*time.Second), "O")
			r2.OnLost = backend.LossFunc(other.onLost)
			acquire(t, b, r2)

			at := time.Now()
			tt.lose(t, b, operator, c)
			took := lost.await(t, lossBound, at)
			t.Logf("OnLost %v after the loss", took)
			if !errors.Is(lost.cause, backend.ErrLeaseExpired) {
				t.Errorf("OnLost cause %v, want ErrLeaseExpired", lost.cause)
			}
			if len(other.calls) != 0 {
				t.Errorf("OnLost of an unaffected claim was called")
			}
			// The key is free again for others.
			c2 := acquire(t, b, request("held", grant(t, b, 30*time.Second), "next"))
			if c2.Token <= c.Token {
				t.Errorf("next holder's token %d not above %d", c2.Token, c.Token)
			}
			if err := b.Release(testCtx(t, waitBound), c); err != nil {
				t.Errorf("Release of the lost claim: %v, want nil", err)
			}
			if len(lost.calls) != 1 {
				t.Errorf("OnLost called %d times, want once", len(lost.calls))
			}
		})
	}
}

// A loss that happens while the backend's watch stream is cut off (its only
// etcd member is down), followed by a compaction of the revision the
// claim's watch would resume from, is still found: etcd refuses to resume
// the watch, and the backend reads the claim's key instead.
func TestLossAcrossCompactedGap(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	eps := c.Endpoints()
	prefix := uniquePrefix(t)
	// The holder talks to member 0 only; the operator to the others.
	holderCli := c.Client(t, func(cfg *clientv3.Config) { cfg.Endpoints = eps[:1] })
	operator := c.Client(t, func(cfg *clientv3.Config) { cfg.Endpoints = eps[1:] })
	b, err := etcd.New(holderCli, etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	lost := newLostSignal()
	r := request("k", grant(t, b, 60*time.Second), "H")
	r.OnLost = backend.LossFunc(lost.onLost)
	claim := acquire(t, b, r)

	c.StopMember(0)
	ctx := testCtx(t, 20*time.Second)
	if _, err := operator.Delete(ctx, b.ClaimKey(claim)); err != nil {
		t.Fatal(err)
	}
	put, err := operator.Put(ctx, prefix+"filler", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.Compact(ctx, put.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost.fired:
		t.Fatal("OnLost fired while the holder could not hear from etcd")
	default:
	}
	restarted := time.Now()
	c.RestartMemberT(t, 0)
	t.Logf("OnLost %v after the member's restart began", lost.await(t, 20*time.Second, restarted))
}
