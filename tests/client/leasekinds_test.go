package client_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/etcd"
)

// leaseCounter counts, through gRPC interceptors on one etcd client, the
// lease grants the client sends, and reports each keep-alive request it
// sends on renewals, with the lease it names and when it went.
type leaseCounter struct {
	grants   atomic.Int64
	renewals chan renewal // buffered; a renewal that does not fit is dropped and counted
	dropped  atomic.Int64
}

type renewal struct {
	lease int64
	at    time.Time
}

const (
	leaseGrantMethod     = "/etcdserverpb.Lease/LeaseGrant"
	leaseKeepAliveMethod = "/etcdserverpb.Lease/LeaseKeepAlive"
)

func newLeaseCounter() *leaseCounter { return &leaseCounter{renewals: make(chan renewal, 1024)} }

// configure installs the interceptors; pass it to Cluster.Client.
func (lc *leaseCounter) configure(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions,
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
			cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == leaseGrantMethod {
				lc.grants.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
			method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || method != leaseKeepAliveMethod {
				return s, err
			}
			return &keepAliveHook{ClientStream: s, lc: lc}, nil
		}))
}

// keepAliveHook is a keep-alive stream that reports each request it sends.
type keepAliveHook struct {
	grpc.ClientStream
	lc *leaseCounter
}

func (h *keepAliveHook) SendMsg(m any) error {
	if req, ok := m.(*pb.LeaseKeepAliveRequest); ok {
		select {
		case h.lc.renewals <- renewal{req.ID, time.Now()}:
		default:
			h.lc.dropped.Add(1)
		}
	}
	return h.ClientStream.SendMsg(m)
}

// next waits up to waitBound for the next keep-alive sent.
func (lc *leaseCounter) next(t *testing.T) renewal {
	t.Helper()
	select {
	case r := <-lc.renewals:
		return r
	case <-time.After(waitBound):
		t.Fatalf("no keep-alive sent within %v", waitBound)
		return renewal{}
	}
}

// drain forgets the keep-alives reported so far.
func (lc *leaseCounter) drain() {
	for {
		select {
		case <-lc.renewals:
		default:
			return
		}
	}
}

// Guarantee 9 for every kind on etcd: shared, counted and multi-key guards
// (exclusive and shared) of one client with one TTL share one lease, which
// the client grants once and renews with one keep-alive per renewal
// interval however many guards it holds, and holding hundreds more of them
// starts no goroutine per guard. What the client sends is counted on the
// wire.
func TestEveryKindSharesOneLeaseAndKeepAliveOnEtcd(t *testing.T) {
	const (
		ttl      = 3 * time.Second
		interval = ttl / 3 // the default watchdog interval
		perKind  = 100
	)
	lc := newLeaseCounter()
	cli := shared.Client(t, lc.configure)
	b, err := etcd.New(cli, etcd.WithPrefix(uniquePrefix(t)))
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	c, err := ashlock.ConnectWith(testCtx(t), ashlock.LockConfig{DefaultTTL: ttl, Logger: quiet}, b)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	kinds := []struct {
		name  string
		build func(i int) *ashlock.LockBuilder
	}{
		{"shared", func(int) *ashlock.LockBuilder { return c.Lock("readers").Shared() }},
		{"counted", func(i int) *ashlock.LockBuilder { return c.Lock(fmt.Sprint("pool/", i/3)).WithPermits(3) }},
		{"LockAll", func(i int) *ashlock.LockBuilder {
			return c.LockAll(fmt.Sprint("all/", i, "/b"), fmt.Sprint("all/", i, "/a"), fmt.Sprint("all/", i, "/c"))
		}},
		{"shared LockAll", func(int) *ashlock.LockBuilder { return c.LockAll("rall/b", "rall/a").Shared() }},
	}
	ctx := testCtx(t)
	// Every guard is kept until the end: one dropped would be released.
	var guards []*ashlock.Guard
	defer runtime.KeepAlive(&guards)
	acquire := func(kind string, lb *ashlock.LockBuilder) {
		t.Helper()
		g, err := lb.Acquire(ctx)
		require.NoError(t, err, kind)
		guards = append(guards, g)
	}
	// Warm up: the first guard starts the lease's renewals and the
	// backend's watch stream.
	for _, k := range kinds {
		acquire(k.name, k.build(perKind))
	}
	before := runtime.NumGoroutine()
	for i := range perKind {
		for _, k := range kinds {
			acquire(k.name, k.build(i))
		}
	}
	// Not a goroutine per guard: a handful may come and go with renewals
	// and gRPC streams in flight.
	after := runtime.NumGoroutine()
	t.Logf("goroutines: %d before, %d after %d more guards", before, after, len(kinds)*perKind)
	assert.Less(t, after-before, 30, "goroutines grew from %d to %d for %d more guards", before, after, len(kinds)*perKind)

	first, err := guards[0].Claim()
	require.NoError(t, err)
	for i, g := range guards {
		claim, err := g.Claim()
		require.NoError(t, err)
		require.Equal(t, first.Lease, claim.Lease, "guard %d (%s) is not on the first guard's lease", i, kinds[i%len(kinds)].name)
	}
	assert.Equal(t, int64(1), lc.grants.Load(), "leases granted for %d guards of one TTL", len(guards))

	// Over three renewal intervals, which is the TTL: one keep-alive per
	// interval, of the one lease, however many guards it holds.
	lc.drain()
	sent := []renewal{lc.next(t)}
	for range 3 {
		sent = append(sent, lc.next(t))
	}
	for i, r := range sent {
		assert.Equal(t, int64(first.Lease), r.lease, "keep-alive %d renews lease %x, want the guards' lease %x", i, r.lease, int64(first.Lease))
		if i > 0 {
			gap := r.at.Sub(sent[i-1].at)
			t.Logf("keep-alive %d: %v after the one before", i, gap)
			assert.GreaterOrEqual(t, gap, interval*3/4, "keep-alive %d came %v after the one before it; want one per %v interval", i, gap, interval)
		}
	}
	assert.Zero(t, lc.dropped.Load(), "keep-alives the counter could not keep (over 1024 sent)")
	assert.Equal(t, int64(1), lc.grants.Load(), "leases granted over three renewals")
	for i, g := range guards {
		require.NoError(t, g.Err(), "guard %d (%s) after a TTL of renewals", i, kinds[i%len(kinds)].name)
	}
}
