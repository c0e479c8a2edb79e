package etcdbackend_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// An etcd that cannot be reached - nothing listening, or a server that
// went away - gives ErrUnavailable (joined with the deadline error) by the
// caller's deadline, not later.
func TestUnreachableGivesUnavailableInTime(t *testing.T) {
	stopped := etcdtest.Start(t)
	stoppedCli := stopped.Client(t)
	tests := []struct {
		name string
		cli  func(t *testing.T) *clientv3.Client
	}{
		{"NothingListening", func(t *testing.T) *clientv3.Client {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cli.Close() })
			return cli
		}},
		{"ServerStopped", func(t *testing.T) *clientv3.Client {
			stopped.StopMember(0)
			return stoppedCli
		}},
	}
	const deadline = 300 * time.Millisecond
	// Time allowed past the deadline: scheduling on a loaded machine, never
	// a cleanup or a retry.
	const slack = time.Second
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := etcd.New(tt.cli(t), etcd.WithPrefix(uniquePrefix(t)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			calls := []struct {
				name string
				call func(ctx context.Context) error
			}{
				{"Grant", func(ctx context.Context) error { _, err := b.Grant(ctx, 5*time.Second); return err }},
				{"KeepAlive", func(ctx context.Context) error { _, err := b.KeepAlive(ctx, 42); return err }},
				{"AcquireFair", func(ctx context.Context) error {
					_, err := b.Acquire(ctx, request("k", backend.Lease{ID: 42}, "x"))
					return err
				}},
				{"TryAcquire", func(ctx context.Context) error {
					r := request("k", backend.Lease{ID: 42}, "x")
					r.Wait = false
					_, err := b.Acquire(ctx, r)
					return err
				}},
				{"Release", func(ctx context.Context) error { return b.Release(ctx, backend.Claim{Key: "k", ID: "x", Token: 7}) }},
				{"Inspect", func(ctx context.Context) error { _, err := b.Inspect(ctx, "k"); return err }},
				{"Revoke", func(ctx context.Context) error { return b.Revoke(ctx, 42) }},
			}
			for _, c := range calls {
				t.Run(c.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					defer cancel()
					begin := time.Now()
					err := c.call(ctx)
					took := time.Since(begin)
					if !errors.Is(err, backend.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("%v, want ErrUnavailable joined with DeadlineExceeded", err)
					}
					if took > deadline+slack {
						t.Errorf("returned after %v, deadline was %v", took, deadline)
					}
				})
			}
		})
	}
}

// A wait cancelled while etcd is down returns promptly, and its claim,
// which could not be deleted then, is deleted in the background once etcd
// is back.
func TestCancelledWaitDuringOutage(t *testing.T) {
	c := etcdtest.Start(t)
	prefix := uniquePrefix(t)
	hb, _ := newBackend(t, c, prefix)
	wb, _ := newBackend(t, c, prefix)
	operator := c.Client(t)
	acquire(t, hb, request("k", grant(t, hb, 60*time.Second), "H"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := start(ctx, wb, request("k", grant(t, wb, 60*time.Second), "W"))
	awaitCount(t, operator, prefix+"claims/", 2)

	c.StopMember(0)
	cancelled := time.Now()
	cancel()
	res := await(t, w, "W cancelled during the outage")
	if took := time.Since(cancelled); took > 3*time.Second {
		t.Errorf("cancelled Acquire returned %v after the cancel", took)
	}
	if !errors.Is(res.err, context.Canceled) {
		t.Errorf("cancelled Acquire: %v, want context.Canceled", res.err)
	}

	c.RestartMemberT(t, 0)
	awaitCount(t, operator, prefix+"claims/", 1) // the holder's claim only
}

// A fair waiter keeps its place through an etcd outage: the member going
// away and coming back does not fail its Acquire, and it takes the key
// when the holder releases afterwards.
func TestWaitSurvivesOutage(t *testing.T) {
	c := etcdtest.Start(t)
	prefix := uniquePrefix(t)
	hb, _ := newBackend(t, c, prefix)
	wb, _ := newBackend(t, c, prefix)
	operator := c.Client(t)
	h := acquire(t, hb, request("k", grant(t, hb, 60*time.Second), "H"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitBound)
	defer cancel()
	w := start(ctx, wb, request("k", grant(t, wb, 60*time.Second), "W"))
	awaitCount(t, operator, prefix+"claims/", 2)

	c.StopMember(0)
	c.RestartMemberT(t, 0)
	notYet(t, w, "W across the outage")
	if err := hb.Release(testCtx(t, waitBound), h); err != nil {
		t.Fatal(err)
	}
	res := await(t, w, "W after the holder's release")
	if res.err != nil {
		t.Fatalf("waiter after the outage: %v, want the key", res.err)
	}
	if res.claim.Token <= h.Token {
		t.Errorf("waiter's token %d is not above the holder's %d", res.claim.Token, h.Token)
	}
}
