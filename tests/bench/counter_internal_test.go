package bench_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
)

// fakeStream is a grpc.ClientStream whose RecvMsg fails after ok messages.
type fakeStream struct {
	grpc.ClientStream
	ok int
}

func (f *fakeStream) SendMsg(any) error { return nil }

func (f *fakeStream) RecvMsg(any) error {
	if f.ok == 0 {
		return errors.New("stream ended")
	}
	f.ok--
	return nil
}

// The request counts the benchmarks report come from these interceptors.
func TestRPCCounter(t *testing.T) {
	var r rpcCounter
	invoked := 0
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		invoked++
		return nil
	}
	for range 3 {
		if err := r.interceptUnary(context.Background(), "/etcdserverpb.KV/Txn", nil, nil, nil, invoker); err != nil {
			t.Fatal(err)
		}
	}
	if invoked != 3 {
		t.Fatalf("invoker called %d times, want 3", invoked)
	}

	open := func(method string, recv int) grpc.ClientStream {
		t.Helper()
		streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			return &fakeStream{ok: recv}, nil
		}
		s, err := r.interceptStream(context.Background(), &grpc.StreamDesc{}, nil, method, streamer)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	watch := open("/etcdserverpb.Watch/Watch", 2)
	ka := open("/etcdserverpb.Lease/LeaseKeepAlive", 1)
	for _, s := range []grpc.ClientStream{watch, watch, ka, ka, ka} {
		if err := s.SendMsg(nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // the third receive on each fails and is not counted
		_ = watch.RecvMsg(nil)
		_ = ka.RecvMsg(nil)
	}

	want := counts{unary: 3, streamSent: 5, streamRecv: 3, keepAlives: 3}
	got := r.snapshot()
	if got != want {
		t.Errorf("counts = %+v, want %+v", got, want)
	}
	if got.requests() != 5 {
		t.Errorf("requests = %d, want 5 (3 unary + 2 sent on the watch stream; keep-alives not counted)", got.requests())
	}
	if d := got.sub(counts{unary: 1, streamSent: 1, streamRecv: 1, keepAlives: 1}); d != (counts{2, 4, 2, 2}) {
		t.Errorf("sub = %+v", d)
	}
}
