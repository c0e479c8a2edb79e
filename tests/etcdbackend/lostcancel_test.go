package etcdbackend_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
)

// dropReply makes the next Txn that puts a claim under prefix commit in
// etcd and then fail at the client, as if its reply had been lost, and
// closes fired when it has.
type dropReply struct {
	prefix string
	once   sync.Once
	armed  chan struct{} // closed to arm
	fired  chan struct{}
}

func (d *dropReply) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	select {
	case <-d.armed:
	default:
		return err
	}
	txn, ok := req.(*pb.TxnRequest)
	if err != nil || !ok || !putsClaim(txn, d.prefix) {
		return err
	}
	lost := false
	d.once.Do(func() { lost = true; close(d.fired) })
	if lost {
		return status.Error(codes.Unavailable, "test: reply lost")
	}
	return err
}

// newDroppingBackend returns a Backend under prefix whose client loses the
// reply of its first claim-creating Txn once d.armed is closed.
func newDroppingBackend(t *testing.T, prefix string) (*dropReply, *etcd.Backend, *clientv3.Client) {
	t.Helper()
	d := &dropReply{prefix: prefix, armed: make(chan struct{}), fired: make(chan struct{})}
	b, cli := newBackend(t, shared, prefix, func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(d.intercept))
	})
	return d, b, cli
}

// awaitDropped waits up to waitBound for d to lose a reply.
func awaitDropped(t *testing.T, d *dropReply) {
	t.Helper()
	select {
	case <-d.fired:
	case <-time.After(waitBound):
		t.Fatal("the enqueue reply was not intercepted")
	}
}

// putsClaim reports whether txn may put a claim key under prefix, in any
// branch, nested Txns included.
func putsClaim(txn *pb.TxnRequest, prefix string) bool {
	for _, op := range append(slices.Clone(txn.Success), txn.Failure...) {
		if put := op.GetRequestPut(); put != nil && strings.HasPrefix(string(put.Key), prefix+"claims/") {
			return true
		}
		if nested := op.GetRequestTxn(); nested != nil && putsClaim(nested, prefix) {
			return true
		}
	}
	return false
}

// Guarantee 6 for every kind, in its hardest case: a waiting Acquire whose
// enqueue committed but whose reply was lost, cancelled right then, leaves
// nothing behind - the Acquire cannot know its claim's create revision, and
// still finds and removes the claim. (An election's Campaign is an
// exclusive Acquire with a value.)
func TestLostEnqueueReplyThenCancelLeavesNothingOfEveryKind(t *testing.T) {
	kinds := []struct {
		name   string
		holder []backend.AcquireRequest // what holds the keys first
		req    func(l backend.Lease) backend.AcquireRequest
	}{
		{"exclusive with a value", nil, func(l backend.Lease) backend.AcquireRequest {
			r := request("k", l, "waiter")
			r.Value = []byte("candidate")
			return r
		}},
		{"shared", nil, func(l backend.Lease) backend.AcquireRequest {
			r := request("k", l, "waiter")
			r.Shared = true
			return r
		}},
		{"counted", []backend.AcquireRequest{{Key: "k", Permits: 2}, {Key: "k", Permits: 2}}, func(l backend.Lease) backend.AcquireRequest {
			r := request("k", l, "waiter")
			r.Permits = 2
			return r
		}},
		{"multi-key", nil, func(l backend.Lease) backend.AcquireRequest {
			r := request("a", l, "waiter")
			r.Keys = []string{"a", "k"}
			return r
		}},
		{"shared multi-key", nil, func(l backend.Lease) backend.AcquireRequest {
			r := request("a", l, "waiter")
			r.Keys, r.Shared = []string{"a", "k"}, true
			return r
		}},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			d, b, cli := newDroppingBackend(t, prefix)
			hl := grant(t, b, 30*time.Second)
			holders := kind.holder
			if holders == nil {
				holders = []backend.AcquireRequest{{Key: "k"}}
			}
			for _, h := range holders {
				r := request(h.Key, hl, "holder")
				r.Permits = h.Permits
				acquire(t, b, r)
			}
			held := keys(t, cli, prefix+"claims/")

			wl := grant(t, b, 30*time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			close(d.armed)
			res := start(ctx, b, kind.req(wl))
			awaitDropped(t, d)
			cancel()
			var r result
			select {
			case r = <-res:
			case <-time.After(waitBound):
				t.Fatal("the cancelled Acquire did not return")
			}
			assert.ErrorIs(t, r.err, context.Canceled)
			require.Equal(t, held, keys(t, cli, prefix+"claims/"), "the cancelled Acquire left a claim")
		})
	}
}
