package etcdbackend_test

import (
	"context"
	"sync"
	"sync/atomic"
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
)

// lateCreate makes the next Txn that may put a claim under prefix fail for
// its caller without an answer (codes.Unavailable), and reach etcd only
// once apply is called: a create held up on the way, applied after
// requests sent later.
type lateCreate struct {
	prefix  string
	armed   atomic.Bool
	release func() // lets the held Txn go; idempotent
	gate    chan struct{}
	applied chan *pb.TxnResponse
}

func newLateCreate(t *testing.T, prefix string) *lateCreate {
	lc := &lateCreate{prefix: prefix, gate: make(chan struct{}), applied: make(chan *pb.TxnResponse, 1)}
	lc.release = sync.OnceFunc(func() { close(lc.gate) })
	t.Cleanup(lc.release) // a test that fails early lets the held Txn go too
	return lc
}

func (l *lateCreate) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if txn, ok := req.(*pb.TxnRequest); ok && putsClaim(txn, l.prefix) && l.armed.CompareAndSwap(true, false) {
		go func() {
			<-l.gate
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			defer cancel()
			resp := new(pb.TxnResponse)
			if invoker(ctx, method, req, resp, cc, opts...) != nil {
				resp = nil
			}
			l.applied <- resp
		}()
		return status.Error(codes.Unavailable, "test: no answer")
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// apply lets the held Txn reach etcd and returns etcd's answer to it.
func (l *lateCreate) apply(t *testing.T) *pb.TxnResponse {
	t.Helper()
	l.release()
	select {
	case resp := <-l.applied:
		require.NotNil(t, resp, "the late create failed")
		return resp
	case <-time.After(waitBound):
		t.Fatal("the late create was not applied")
		return nil
	}
}

// An Acquire whose create got no answer, and which etcd applies only after
// the Acquire's cleanup has deleted the claim by name, leaves nothing that
// blocks the key while its lease lives: the claim the late create makes,
// bound to that lease, is deleted, at every key of a multi-key claim, and
// another client takes the keys while the lease is still alive.
func TestLateCreateLeavesNoStray(t *testing.T) {
	for _, tt := range []struct {
		name string
		keys []string
	}{{"single key", nil}, {"multi-key", []string{"k", "m"}}} {
		t.Run(tt.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			lc := newLateCreate(t, prefix)
			b, cli := newBackend(t, shared, prefix, func(cfg *clientv3.Config) {
				cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(lc.intercept))
			})
			other, _ := newBackend(t, shared, prefix)
			l, lo := grant(t, b, 30*time.Second), grant(t, other, 30*time.Second)

			r := request("k", l, "late")
			r.Keys, r.Fair = tt.keys, false // a non-queued create is tried once
			lc.armed.Store(true)
			_, err := b.Acquire(testCtx(t, waitBound), r)
			require.ErrorIs(t, err, backend.ErrUnavailable, "Acquire whose create got no answer")
			require.Empty(t, keys(t, cli, prefix), "keys after the failed Acquire's cleanup")
			require.True(t, lc.apply(t).Succeeded, "the late create made its claim")

			o := request("k", lo, "other")
			o.Keys = tt.keys
			c := acquire(t, other, o)
			_, err = b.KeepAlive(testCtx(t, waitBound), l.ID)
			require.NoError(t, err, "the late create's lease, once the other client holds the key")
			release(t, other, c)
			assert.Empty(t, keys(t, cli, prefix), "keys left under the prefix")
		})
	}
}
