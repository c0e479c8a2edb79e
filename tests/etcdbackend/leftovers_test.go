package etcdbackend_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ash-lock/ashlock/backend"
)

// After every way an acquisition can end - release, cancelled and timed-out
// waits (fair and not), a failed TryAcquire, a failing Stamp, a revoked
// lease - and the backends' Close, nothing is left under the prefix but
// stamp records.
func TestNothingLeftBehind(t *testing.T) {
	prefix := uniquePrefix(t)
	a, _ := newBackend(t, shared, prefix)
	b, cli := newBackend(t, shared, prefix)
	la, lb := grant(t, a, 30*time.Second), grant(t, b, 30*time.Second)

	stamped := request("k", la, "A")
	stamped.Stamp = nextStamp
	holder := acquire(t, a, stamped)

	// Waits that end by cancellation and by deadline, fair and not.
	for _, fair := range []bool{true, false} {
		r := request("k", lb, "cancelled")
		r.Fair = fair
		ctx, cancel := context.WithCancel(context.Background())
		w := start(ctx, b, r)
		if fair {
			awaitCount(t, cli, prefix+"claims/", 2)
		}
		cancel()
		if res := await(t, w, "cancelled wait"); !errors.Is(res.err, context.Canceled) {
			t.Fatalf("cancelled wait (fair=%v): %v, want context.Canceled", fair, res.err)
		}
		r.ID += "-deadline"
		dctx, dcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		res := await(t, start(dctx, b, r), "timed-out wait")
		dcancel()
		if !errors.Is(res.err, context.DeadlineExceeded) {
			t.Fatalf("timed-out wait (fair=%v): %v, want context.DeadlineExceeded", fair, res.err)
		}
	}
	try := request("k", lb, "try")
	try.Wait = false
	if _, err := b.Acquire(testCtx(t, waitBound), try); !errors.Is(err, backend.ErrLocked) {
		t.Fatalf("TryAcquire of a held key: %v, want ErrLocked", err)
	}
	if err := a.Release(testCtx(t, waitBound), holder); err != nil {
		t.Fatal(err)
	}

	refused := errors.New("stamp refused")
	bad := request("k2", lb, "bad stamp")
	bad.Stamp = func(backend.Timestamp) (backend.Timestamp, error) { return backend.Timestamp{}, refused }
	if _, err := b.Acquire(testCtx(t, waitBound), bad); !errors.Is(err, refused) {
		t.Fatalf("Acquire with a failing Stamp: %v, want its error", err)
	}

	acquire(t, b, request("k3", lb, "revoked"))
	if err := b.Revoke(testCtx(t, waitBound), lb.ID); err != nil {
		t.Fatal(err)
	}
	acquire(t, a, request("k4", la, "closed while holding")) // its lease is revoked in cleanup
	if err := a.Revoke(testCtx(t, waitBound), la.ID); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b.Close()

	for _, k := range keys(t, cli, prefix) {
		if !strings.HasPrefix(k, prefix+"stamps/") {
			t.Errorf("left behind: %s", k)
		}
	}
	if got := keys(t, cli, prefix+"stamps/"); len(got) != 1 {
		t.Errorf("stamp records %q, want one (for k)", got)
	}
}

// lostReply makes the next Txn that creates a claim under prefix commit in
// etcd and then fail at the client, as if its reply had been lost.
type lostReply struct {
	prefix string
	armed  atomic.Bool
	fired  atomic.Bool
}

func (l *lostReply) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil && l.createsClaim(req) && l.armed.CompareAndSwap(true, false) {
		l.fired.Store(true)
		return status.Error(codes.Unavailable, "test: reply lost")
	}
	return err
}

// createsClaim reports whether req is a Txn that may put a claim key (the
// enqueue), as opposed to, say, the backend's reads of its claims.
func (l *lostReply) createsClaim(req any) bool {
	txn, ok := req.(*pb.TxnRequest)
	if !ok {
		return false
	}
	for _, op := range append(txn.Success, txn.Failure...) {
		if put := op.GetRequestPut(); put != nil && strings.HasPrefix(string(put.Key), l.prefix+"claims/") {
			return true
		}
	}
	return false
}

// An Acquire whose enqueue committed but whose reply never arrived leaves
// nothing behind. A fair (queueing) Acquire sends the Txn again, finds the
// claim its lost attempt made under its name and goes on with it: it gets
// the key with that one claim. A non-fair one fails, and still removes the
// claim it cannot know the create revision of: it deletes it by name, a
// name lent to it alone.
func TestLostEnqueueReplyLeavesNothing(t *testing.T) {
	prefix := uniquePrefix(t)
	lr := &lostReply{prefix: prefix}
	b, cli := newBackend(t, shared, prefix, func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(lr.intercept))
	})
	l := grant(t, b, 30*time.Second)

	for _, fair := range []bool{true, false} {
		r := request("k", l, "unlucky")
		r.Fair = fair
		lr.armed.Store(true)
		lr.fired.Store(false)
		got, err := b.Acquire(testCtx(t, waitBound), r)
		if !lr.fired.Load() {
			t.Fatalf("fair=%v: the enqueue reply was not intercepted", fair)
		}
		if fair {
			if err != nil {
				t.Fatalf("fair Acquire with a lost reply: %v, want the key", err)
			}
			if left := keys(t, cli, prefix+"claims/"); len(left) != 1 || left[0] != b.ClaimKey(got) {
				t.Fatalf("fair Acquire with a lost reply: claims %q, want only its own %q", left, b.ClaimKey(got))
			}
			if err := b.Release(testCtx(t, waitBound), got); err != nil {
				t.Fatal(err)
			}
		} else if !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("non-fair Acquire with a lost reply: %v, want ErrUnavailable", err)
		}
		if left := keys(t, cli, prefix+"claims/"); len(left) != 0 {
			t.Fatalf("fair=%v: claims left after the Acquire: %q", fair, left)
		}
		// The key is free for the next one.
		c := acquire(t, b, request("k", l, "next"))
		if err := b.Release(testCtx(t, waitBound), c); err != nil {
			t.Fatal(err)
		}
	}
}
