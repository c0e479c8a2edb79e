package bench_test

import (
	"context"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
)

// rpcCounter counts what etcd clients send and receive, through gRPC client
// interceptors: every unary call (each retry attempt included, since the
// interceptors sit inside clientv3's retry loop), every message sent on a
// stream (watch create and cancel requests, lease keep-alives) and every
// message received on one (watch events, keep-alive answers). One counter
// may serve many clients; it is safe for concurrent use.
type rpcCounter struct {
	unary      atomic.Int64
	streamSent atomic.Int64
	streamRecv atomic.Int64
	keepAlives atomic.Int64 // LeaseKeepAlive requests, also counted in streamSent
}

// counts is a snapshot of an rpcCounter.
type counts struct {
	unary, streamSent, streamRecv, keepAlives int64
}

// requests is what a client asked of etcd for locking: unary calls and
// stream messages sent, lease keep-alives excepted. This is the "rpcs" of
// the benchmarks' metrics. Keep-alives are left out because they follow
// the clock, not the work (each client renews its lease every few seconds
// whatever it does); BenchmarkHold reports them.
func (c counts) requests() int64 { return c.unary + c.streamSent - c.keepAlives }

func (c counts) sub(d counts) counts {
	return counts{
		unary:      c.unary - d.unary,
		streamSent: c.streamSent - d.streamSent,
		streamRecv: c.streamRecv - d.streamRecv,
		keepAlives: c.keepAlives - d.keepAlives,
	}
}

func (r *rpcCounter) snapshot() counts {
	return counts{
		unary:      r.unary.Load(),
		streamSent: r.streamSent.Load(),
		streamRecv: r.streamRecv.Load(),
		keepAlives: r.keepAlives.Load(),
	}
}

// dialOptions returns the interceptors to put in clientv3.Config.DialOptions.
func (r *rpcCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(r.interceptUnary),
		grpc.WithChainStreamInterceptor(r.interceptStream),
	}
}

func (r *rpcCounter) interceptUnary(ctx context.Context, method string, req, reply any,
	cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r.unary.Add(1)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (r *rpcCounter) interceptStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
	method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countedStream{ClientStream: s, r: r, keepAlive: strings.HasSuffix(method, "/LeaseKeepAlive")}, nil
}

type countedStream struct {
	grpc.ClientStream
	r         *rpcCounter
	keepAlive bool
}

func (s *countedStream) SendMsg(m any) error {
	s.r.streamSent.Add(1)
	if s.keepAlive {
		s.r.keepAlives.Add(1)
	}
	return s.ClientStream.SendMsg(m)
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		s.r.streamRecv.Add(1)
	}
	return err
}
