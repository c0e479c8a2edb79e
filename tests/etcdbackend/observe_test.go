package etcdbackend_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// observer collects the distinct states an etcd Observe yields.
type observer struct {
	states chan string
	done   chan struct{}
}

// state names a LockInfo by its holders' tokens and values.
func state(info backend.LockInfo) string {
	s := ""
	for _, h := range info.Holders {
		s += fmt.Sprintf("%d=%s;", h.Token, h.Value)
	}
	if s == "" {
		return "free"
	}
	return s
}

func startObserver(ctx context.Context, b *etcd.Backend, key string) *observer {
	o := &observer{states: make(chan string, 100), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		last := ""
		for info, err := range b.Observe(ctx, key) {
			s := state(info)
			if err != nil {
				s = "error: " + err.Error()
			}
			if s != last {
				o.states <- s
				last = s
			}
		}
	}()
	return o
}

// expect checks that the next distinct states are want, in order.
func (o *observer) expect(t *testing.T, bound time.Duration, want ...string) {
	t.Helper()
	deadline := time.After(bound)
	for _, w := range want {
		select {
		case s := <-o.states:
			require.Equal(t, w, s)
		case <-deadline:
			t.Fatalf("observer: no state %q within %v", w, bound)
		}
	}
}

func held(c backend.Claim, v string) string { return fmt.Sprintf("%d=%s;", c.Token, v) }

// restartSetup runs an observer whose client reaches member 0 only, in a
// 3-member cluster, and a writer on the other two members.
func restartSetup(t *testing.T, configure ...func(*clientv3.Config)) (c *etcdtest.Cluster, w *etcd.Backend, wcli *clientv3.Client, o *observer) {
	c = etcdtest.StartCluster(t, 3)
	prefix := uniquePrefix(t)
	eps := c.Endpoints()
	a, _ := newBackend(t, c, prefix, append(configure, func(cfg *clientv3.Config) { cfg.Endpoints = eps[:1] })...)
	w, wcli = newBackend(t, c, prefix, func(cfg *clientv3.Config) { cfg.Endpoints = eps[1:] })
	ctx, cancel := context.WithCancel(context.Background())
	o = startObserver(ctx, a, "k")
	t.Cleanup(func() { cancel(); <-o.done })
	o.expect(t, waitBound, "free")
	return c, w, wcli, o
}

// Member 0, the only one the observer's client reaches, stops while the
// key changes hands twice: after the restart the observer resumes from
// the last revision it saw and reports every change it missed, in order.
func TestObserveResumesAfterMemberRestart(t *testing.T) {
	c, w, _, o := restartSetup(t)
	l := grant(t, w, 30*time.Second)
	x := acquire(t, w, valued(request("k", l, "X"), "x"))
	o.expect(t, waitBound, held(x, "x"))

	c.StopMember(0)
	ctx := testCtx(t, waitBound)
	require.NoError(t, w.Release(ctx, x))
	y := acquire(t, w, valued(request("k", l, "Y"), "y"))
	require.NoError(t, w.SetValue(ctx, y, []byte("y2")))
	c.RestartMemberT(t, 0)

	o.expect(t, 3*waitBound, "free", held(y, "y"), held(y, "y2"))
	require.NoError(t, w.Release(testCtx(t, waitBound), y))
	o.expect(t, waitBound, "free")
}

// The same, but the store is compacted past the revision the observer
// last saw: it resynchronises with one read and goes on.
func TestObserveResyncsAfterCompaction(t *testing.T) {
	var reads answeredReads
	c, w, wcli, o := restartSetup(t, reads.configure)
	l := grant(t, w, 30*time.Second)
	x := acquire(t, w, valued(request("k", l, "X"), "x"))
	o.expect(t, waitBound, held(x, "x"))

	c.StopMember(0)
	ctx := testCtx(t, waitBound)
	require.NoError(t, w.Release(ctx, x))
	y := acquire(t, w, valued(request("k", l, "Y"), "y"))
	resp, err := wcli.Get(ctx, "anything")
	require.NoError(t, err)
	_, err = wcli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical())
	require.NoError(t, err)
	before := reads.n.Load()
	c.RestartMemberT(t, 0)

	o.expect(t, 3*waitBound, held(y, "y"))
	require.Equal(t, int64(1), reads.n.Load()-before, "reads etcd answered the observer between the restart and its resynchronised state")
	require.NoError(t, w.SetValue(testCtx(t, waitBound), y, []byte("y2")))
	o.expect(t, waitBound, held(y, "y2"))
	require.NoError(t, w.Release(testCtx(t, waitBound), y))
	o.expect(t, waitBound, "free")
}

// A compaction while the observer's watch is running changes nothing.
func TestObserveContinuesThroughCompaction(t *testing.T) {
	prefix := uniquePrefix(t)
	b, cli := newBackend(t, shared, prefix)
	ctx, cancel := context.WithCancel(context.Background())
	o := startObserver(ctx, b, "k")
	defer func() { cancel(); <-o.done }()
	o.expect(t, waitBound, "free")
	l := grant(t, b, 30*time.Second)
	x := acquire(t, b, valued(request("k", l, "X"), "x"))
	o.expect(t, waitBound, held(x, "x"))
	resp, err := cli.Get(testCtx(t, waitBound), "anything")
	require.NoError(t, err)
	_, err = cli.Compact(testCtx(t, waitBound), resp.Header.Revision, clientv3.WithCompactPhysical())
	require.NoError(t, err)
	require.NoError(t, b.Release(testCtx(t, waitBound), x))
	o.expect(t, waitBound, "free")
}

func valued(r backend.AcquireRequest, v string) backend.AcquireRequest { r.Value = []byte(v); return r }

// Member 0, the only one the observer's client reaches, is cut off from
// the others and loses its leader (its watch streams close: they require
// a leader) while the key changes hands; once healed, the observer
// resumes from the last revision it saw and reports every change, in order.
func TestObserveResumesAfterLeaderLoss(t *testing.T) {
	c, w, _, o := restartSetup(t)
	l := grant(t, w, 30*time.Second)
	x := acquire(t, w, valued(request("k", l, "X"), "x"))
	o.expect(t, waitBound, held(x, "x"))

	require.NoError(t, c.Partition(0))
	// The other two elect a leader among themselves if member 0 led.
	ctx := testCtx(t, 3*waitBound)
	_, err := c.AwaitLeader(ctx, func(i int) bool { return i > 0 })
	require.NoError(t, err, "no leader among members 1 and 2")
	require.NoError(t, w.Release(ctx, x))
	y := acquire(t, w, valued(request("k", l, "Y"), "y"))
	// The scenario, not a wait for an event: the fault lasts beyond member
	// 0's election timeout (1s), so that it finds itself without a leader
	// and ends its watch streams.
	time.Sleep(3 * time.Second)
	c.Heal()

	o.expect(t, 3*waitBound, "free", held(y, "y"))
	require.NoError(t, w.Release(testCtx(t, waitBound), y))
	o.expect(t, waitBound, "free")
}

// answeredReads counts, through a gRPC interceptor on one client, the
// unary requests etcd answered: an observer sends none but the reads that
// resynchronise it.
type answeredReads struct{ n atomic.Int64 }

func (r *answeredReads) configure(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil {
				r.n.Add(1)
			}
			return err
		}))
}
