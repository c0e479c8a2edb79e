package etcdbackend_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lateRequest makes the next unary request that match accepts, once armed,
// fail for its caller without an answer (codes.Unavailable), and reach
// etcd only once apply is called: a request held up on the way, applied
// after requests sent later. R is the type of etcd's answer to it.
type lateRequest[R any] struct {
	what    string // the held request, for failures: "the late create"
	match   func(req any) bool
	armed   atomic.Bool
	release func() // lets the held request go; idempotent
	gate    chan struct{}
	applied chan lateAnswer[R]
}

type lateAnswer[R any] struct {
	resp *R // nil if etcd failed the request
	err  error
}

func newLateRequest[R any](t *testing.T, what string, match func(req any) bool) *lateRequest[R] {
	l := &lateRequest[R]{what: what, match: match, gate: make(chan struct{}), applied: make(chan lateAnswer[R], 1)}
	l.release = sync.OnceFunc(func() { close(l.gate) })
	t.Cleanup(l.release) // a test that fails early lets the held request go too
	return l
}

// configure installs the interceptor; pass it to newBackend.
func (l *lateRequest[R]) configure(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(l.intercept))
}

func (l *lateRequest[R]) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if l.match(req) && l.armed.CompareAndSwap(true, false) {
		go func() {
			<-l.gate
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			defer cancel()
			resp := new(R)
			err := invoker(ctx, method, req, resp, cc, opts...)
			if err != nil {
				resp = nil
			}
			l.applied <- lateAnswer[R]{resp, err}
		}()
		return status.Error(codes.Unavailable, "test: no answer")
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// apply lets the held request reach etcd and returns etcd's answer to it
// (nil if etcd failed it) and the error it failed with.
func (l *lateRequest[R]) apply(t *testing.T) (*R, error) {
	t.Helper()
	l.release()
	select {
	case a := <-l.applied:
		return a.resp, a.err
	case <-time.After(waitBound):
		t.Fatal(l.what + " was not applied")
		return nil, nil
	}
}
