package etcdbackend_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
)

// waitBound bounds every wait in these tests for something that should
// happen promptly.
const waitBound = 10 * time.Second

// grant grants a lease of ttl on b and revokes it in t.Cleanup.
func grant(t testing.TB, b *etcd.Backend, ttl time.Duration) backend.Lease {
	t.Helper()
	l, err := b.Grant(testCtx(t, waitBound), ttl)
	if err != nil {
		t.Fatalf("Grant(%v): %v", ttl, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		_ = b.Revoke(ctx, l.ID) // the backend may be closed by now
	})
	return l
}

// numberedKeys returns n distinct, sorted keys: "k00", "k01" and so on.
func numberedKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("k%02d", i)
	}
	return ks
}

// nextStamp is a Stamp function: each stamp's wall time one past the
// previous one's.
func nextStamp(prev backend.Timestamp) (backend.Timestamp, error) {
	return backend.Timestamp{WallTime: prev.WallTime + 1}, nil
}

// request builds a fair, waiting request with a fresh claim ID.
func request(key string, l backend.Lease, owner string) backend.AcquireRequest {
	return backend.AcquireRequest{Key: key, ID: uuid.NewString(), Lease: l.ID, Owner: owner, Wait: true, Fair: true}
}

// acquire runs req to success or fails the test.
func acquire(t testing.TB, b *etcd.Backend, req backend.AcquireRequest) backend.Claim {
	t.Helper()
	c, err := b.Acquire(testCtx(t, waitBound), req)
	if err != nil {
		t.Fatalf("Acquire %q by %s: %v", req.Key, req.Owner, err)
	}
	return c
}

type result struct {
	claim backend.Claim
	err   error
}

// start runs req in the background; the channel delivers its result.
func start(ctx context.Context, b *etcd.Backend, req backend.AcquireRequest) <-chan result {
	ch := make(chan result, 1)
	go func() {
		c, err := b.Acquire(ctx, req)
		ch <- result{c, err}
	}()
	return ch
}

// await waits up to waitBound for a background Acquire.
func await(t testing.TB, ch <-chan result, what string) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitBound):
		t.Fatalf("%s: Acquire did not return within %v", what, waitBound)
		return result{}
	}
}

// notYet checks that a background Acquire has not returned.
func notYet(t testing.TB, ch <-chan result, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: Acquire returned early (token %d, err %v)", what, r.claim.Token, r.err)
	default:
	}
}

// keys lists the etcd keys under prefix.
func keys(t testing.TB, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := cli.Get(testCtx(t, waitBound), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = string(kv.Key)
	}
	return out
}

// claimKeyOtherThan finds the etcd key of the one claim under prefix that
// is not skip.
func claimKeyOtherThan(t testing.TB, cli *clientv3.Client, prefix, skip string) string {
	t.Helper()
	for _, k := range keys(t, cli, prefix) {
		if k != skip {
			return k
		}
	}
	t.Fatalf("no claim under %q other than %s", prefix, skip)
	return ""
}

// awaitCount waits, by watching rather than polling, until exactly n keys
// exist under prefix.
func awaitCount(t testing.TB, cli *clientv3.Client, prefix string, n int64) {
	t.Helper()
	ctx := testCtx(t, waitBound)
	for {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("waiting for %d keys under %q: %v", n, prefix, err)
		}
		if resp.Count == n {
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		wch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-wch:
		case <-ctx.Done():
			cancel()
			t.Fatalf("%d keys under %q after %v, want %d", resp.Count, prefix, waitBound, n)
		}
		cancel()
	}
}

// lostSignal records the first OnLost call of a claim.
type lostSignal struct {
	once  sync.Once
	fired chan struct{}
	at    time.Time
	cause error
	calls chan struct{} // one entry per call, to count repeats
}

func newLostSignal() *lostSignal {
	return &lostSignal{fired: make(chan struct{}), calls: make(chan struct{}, 16)}
}

func (l *lostSignal) onLost(cause error) {
	l.calls <- struct{}{}
	l.once.Do(func() {
		l.at, l.cause = time.Now(), cause
		close(l.fired)
	})
}

// await waits up to bound for OnLost and returns how long after since it
// came.
func (l *lostSignal) await(t testing.TB, bound time.Duration, since time.Time) time.Duration {
	t.Helper()
	select {
	case <-l.fired:
		return l.at.Sub(since)
	case <-time.After(bound):
		t.Fatalf("OnLost not called within %v", bound)
		return 0
	}
}

// watchMethod is the gRPC method of etcd's watch streams.
const watchMethod = "/etcdserverpb.Watch/Watch"

// createHook is a watch stream that shows each create request it sends to
// onCreate first, and each response it receives to onResponse (if set).
type createHook struct {
	grpc.ClientStream
	onCreate   func(*pb.WatchCreateRequest)
	onResponse func(*pb.WatchResponse)
}

func (s *createHook) SendMsg(m any) error {
	if req, ok := m.(*pb.WatchRequest); ok {
		if cr := req.GetCreateRequest(); cr != nil {
			s.onCreate(cr)
		}
	}
	return s.ClientStream.SendMsg(m)
}

func (s *createHook) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if resp, ok := m.(*pb.WatchResponse); ok && err == nil && s.onResponse != nil {
		s.onResponse(resp)
	}
	return err
}
