package etcdbackend_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
)

// A chain of fair waiters on one key is handed the key promptly, each
// waiter woken by the Backend's loss watch rather than by a watch of its
// own. A waiter's own watch starts at a past revision, which etcd catches
// up only every 100ms; eight handoffs through such watches could take up
// to 800ms.
func TestHandoffChainServedByLossWatch(t *testing.T) {
	const (
		waiters = 8
		bound   = 400 * time.Millisecond // generous: each handoff is two round trips
	)
	prefix := uniquePrefix(t)
	var wc watchCreates
	cli := shared.Client(t, func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainStreamInterceptor(wc.intercept))
	})
	b, err := etcd.New(cli, etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	operator := shared.Client(t)
	l := grant(t, b, 30*time.Second)
	awaitLossWatch(t, b, operator, l)

	holder := acquire(t, b, request("k", l, "H"))
	ctx := testCtx(t, waitBound)
	type handoff struct {
		at    time.Time
		token uint64
		err   error
	}
	done := make([]chan handoff, waiters)
	for i := range done {
		done[i] = make(chan handoff, 1)
		req := request("k", l, "W")
		go func() {
			c, err := b.Acquire(ctx, req)
			at := time.Now()
			if err == nil {
				err = b.Release(ctx, c) // hand the key on at once
			}
			done[i] <- handoff{at, c.Token, err}
		}()
		// Queue the waiters one by one, so the order is known.
		awaitCount(t, operator, prefix, int64(i+2))
	}

	start := time.Now()
	if err := b.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	prev := holder.Token
	for i, ch := range done {
		var h handoff
		select {
		case h = <-ch:
		case <-time.After(waitBound):
			t.Fatalf("waiter %d not handed the key within %v", i, waitBound)
		}
		if h.err != nil {
			t.Fatalf("waiter %d: %v", i, h.err)
		}
		if h.token <= prev {
			t.Fatalf("waiter %d got token %d after %d: not in queue order", i, h.token, prev)
		}
		prev = h.token
		t.Logf("waiter %d holds after %v", i, h.at.Sub(start))
	}
	if elapsed := time.Since(start); elapsed > bound {
		t.Errorf("%d handoffs took %v, want under %v", waiters, elapsed, bound)
	}
	// The structural check: no waiter opened a watch of its own (a watch on
	// a single key), and the counter does see the loss watch (a range).
	if n := wc.single.Load(); n != 0 {
		t.Errorf("%d single-key watches opened; want every wait served by the loss watch", n)
	}
	if n := wc.ranged.Load(); n < 1 {
		t.Errorf("%d range watches seen; the counter missed the loss watch", n)
	}
}

// awaitLossWatch returns once b's loss watch is established, that is, once
// it dispatches deletes to the Backend. A claim deleted by hand right after
// the Backend starts may be reported by the watch's first recheck, which
// runs before the watch is marked established; a second one, created after
// that first report, can only be reported by a delete the established
// watch dispatched.
func awaitLossWatch(t *testing.T, b *etcd.Backend, operator *clientv3.Client, l backend.Lease) {
	t.Helper()
	for i := range 2 {
		lost := newLostSignal()
		req := request("warm-up", l, "probe")
		req.OnLost = backend.LossFunc(lost.onLost)
		c := acquire(t, b, req)
		if _, err := operator.Delete(testCtx(t, waitBound), b.ClaimKey(c)); err != nil {
			t.Fatalf("probe %d: deleting its claim: %v", i, err)
		}
		lost.await(t, waitBound, time.Now())
	}
}

// watchCreates counts the watches a client opens, by whether they cover
// one key or a range.
type watchCreates struct {
	single, ranged atomic.Int64
}

func (w *watchCreates) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
	method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != "/etcdserverpb.Watch/Watch" {
		return s, err
	}
	return &watchStream{ClientStream: s, w: w}, nil
}

type watchStream struct {
	grpc.ClientStream
	w *watchCreates
}

func (s *watchStream) SendMsg(m any) error {
	if req, ok := m.(*pb.WatchRequest); ok {
		if cr := req.GetCreateRequest(); cr != nil {
			if len(cr.RangeEnd) == 0 {
				s.w.single.Add(1)
			} else {
				s.w.ranged.Add(1)
			}
		}
	}
	return s.ClientStream.SendMsg(m)
}
