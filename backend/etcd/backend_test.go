package etcd

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ash-lock/ashlock/backend"
)

// unreachableClient returns a client whose only endpoint refuses
// connections. clientv3.New does not dial eagerly, so it succeeds.
func unreachableClient(t *testing.T) *clientv3.Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there any more
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{addr},
		DialTimeout: time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestNewRejects(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	cli := unreachableClient(t)
	if _, err := New(cli, WithPrefix("no-slash")); !errors.Is(err, ErrBadPrefix) {
		t.Fatalf("New with a bad prefix: %v, want ErrBadPrefix", err)
	}
}

func TestClosedBackend(t *testing.T) {
	b, err := New(unreachableClient(t), WithPrefix("t/"))
	if err != nil {
		t.Fatal(err)
	}
	if b.Prefix() != "t/" {
		t.Fatalf("Prefix() = %q", b.Prefix())
	}
	if err := b.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	ctx := context.Background()
	calls := map[string]func() error{
		"Close":     b.Close,
		"Grant":     func() error { _, err := b.Grant(ctx, time.Second); return err },
		"KeepAlive": func() error { _, err := b.KeepAlive(ctx, 1); return err },
		"Revoke":    func() error { return b.Revoke(ctx, 1) },
		"Acquire": func() error {
			_, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "id", Lease: 1, Wait: true, Fair: true})
			return err
		},
		"Release": func() error { return b.Release(ctx, backend.Claim{Key: "k", ID: "id", Token: 1}) },
		"Inspect": func() error { _, err := b.Inspect(ctx, "k"); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			if err := call(); !errors.Is(err, backend.ErrClosed) {
				t.Fatalf("%s after Close: %v, want ErrClosed", name, err)
			}
		})
	}
}

// With no etcd to talk to, every call gives up at the caller's deadline
// with ErrUnavailable joined with the deadline error, and Close still
// returns promptly.
func TestUnreachableGivesUnavailable(t *testing.T) {
	b, err := New(unreachableClient(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	calls := map[string]func(context.Context) error{
		"Grant":     func(ctx context.Context) error { _, err := b.Grant(ctx, time.Second); return err },
		"KeepAlive": func(ctx context.Context) error { _, err := b.KeepAlive(ctx, 1); return err },
		"Revoke":    func(ctx context.Context) error { return b.Revoke(ctx, 1) },
		"Acquire": func(ctx context.Context) error {
			_, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "id", Lease: 1, Wait: true, Fair: true})
			return err
		},
		"Release": func(ctx context.Context) error { return b.Release(ctx, backend.Claim{Key: "k", ID: "id", Token: 1}) },
		"Inspect": func(ctx context.Context) error { _, err := b.Inspect(ctx, "k"); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := call(ctx)
			if !errors.Is(err, backend.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: %v, want ErrUnavailable joined with DeadlineExceeded", name, err)
			}
			if waited := time.Since(start); waited > 5*time.Second {
				t.Fatalf("%s returned after %v", name, waited)
			}
		})
	}
}

func TestAcquireRejectsBadRequest(t *testing.T) {
	b, err := New(unreachableClient(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tests := []struct {
		name string
		req  backend.AcquireRequest
		is   error
	}{
		{"no key", backend.AcquireRequest{ID: "id", Lease: 1}, nil},
		{"no lease", backend.AcquireRequest{Key: "k", ID: "id"}, backend.ErrLeaseExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.Acquire(context.Background(), tt.req)
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) {
				t.Fatalf("Acquire(%+v) = %v, want an error (matching %v)", tt.req, err, tt.is)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = b.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "id", Lease: 1, Wait: true, Fair: true})
	if !errors.Is(err, context.Canceled) || errors.Is(err, backend.ErrLocked) {
		t.Fatalf("Acquire with a cancelled ctx: %v, want context.Canceled", err)
	}
}
