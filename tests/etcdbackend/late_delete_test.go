package etcdbackend_test

import (
	"context"
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

// lateDelete makes the next Delete fail for its caller, without an answer
// (codes.Unavailable), and reach etcd only once release is closed: a
// request held up on the way, applied after requests sent later.
type lateDelete struct {
	armed   atomic.Bool
	release chan struct{}
	applied chan error
}

func (d *lateDelete) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if _, ok := req.(*pb.DeleteRangeRequest); ok && d.armed.CompareAndSwap(true, false) {
		go func() {
			<-d.release
			d.applied <- invoker(context.Background(), method, req, new(pb.DeleteRangeResponse), cc, opts...)
		}()
		return status.Error(codes.Unavailable, "test: no answer")
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// A Release whose delete got no answer, retried with success, leaves the
// claim's name taken: the next claim of the same lease on the key gets
// another name, so that the first delete, applied late, removes nothing
// of it.
func TestLateReleaseDeleteSparesTheNextClaim(t *testing.T) {
	prefix := uniquePrefix(t)
	d := &lateDelete{release: make(chan struct{}), applied: make(chan error, 1)}
	b, cli := newBackend(t, shared, prefix, func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(d.intercept))
	})
	l := grant(t, b, 30*time.Second)
	c := acquire(t, b, request("k", l, "first"))
	d.armed.Store(true)
	require.ErrorIs(t, b.Release(testCtx(t, waitBound), c), backend.ErrUnavailable)
	require.NoError(t, b.Release(testCtx(t, waitBound), c), "the retried Release")

	n := acquire(t, b, request("k", l, "next"))
	assert.NotEqual(t, c.ID, n.ID, "the next claim's name")
	close(d.release)
	select {
	case err := <-d.applied:
		require.NoError(t, err, "the late delete")
	case <-time.After(waitBound):
		t.Fatal("the late delete was not applied")
	}
	assert.Equal(t, []string{prefix + "claims/k/" + n.ID}, keys(t, cli, prefix+"claims/"))
	release(t, b, n)
}
