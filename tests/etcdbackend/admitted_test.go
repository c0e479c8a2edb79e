package etcdbackend_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// queueCompares counts the Txns a client sends that compare over a key
// range - the check, over the whole queue, that nothing older blocks a
// waiter - and the watch creates etcd has answered.
type queueCompares struct{ n, created atomic.Int64 }

func (q *queueCompares) configure(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string,
		req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if txn, ok := req.(*pb.TxnRequest); ok {
			for _, c := range txn.Compare {
				if len(c.RangeEnd) > 0 {
					q.n.Add(1)
					break
				}
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}), grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
		method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != watchMethod {
			return s, err
		}
		return &createHook{ClientStream: s, onCreate: func(*pb.WatchCreateRequest) {}, onResponse: func(r *pb.WatchResponse) {
			if r.Created {
				q.created.Add(1)
			}
		}}, nil
	}))
}

// awaitWatch waits until etcd has answered the client's first watch
// create: a waiter's watch of its predecessor, which from then on sees the
// predecessor's delete as an event (a delete before it would be found by
// the read that closes the watch's start gap, which carries no last
// state).
func (q *queueCompares) awaitWatch(t *testing.T, who string) {
	t.Helper()
	require.Eventually(t, func() bool { return q.created.Load() >= 1 }, waitBound, time.Millisecond, "%s's watch", who)
}

// A waiter whose predecessor was itself admitted after waiting, and then
// released, is admitted by a Txn that compares its own claim alone: the
// delete event carries the predecessor's last state, rewritten when it was
// admitted, which proves that nothing older was left. A waiter behind a
// claim that held from its enqueue (never rewritten) still compares the
// whole queue.
func TestWaiterBehindAdmittedPredecessorComparesOwnClaimOnly(t *testing.T) {
	prefix := uniquePrefix(t)
	hb, operator := newBackend(t, shared, prefix)
	var q1, q2 queueCompares
	b1, _ := newBackend(t, shared, prefix, q1.configure)
	b2, _ := newBackend(t, shared, prefix, q2.configure)
	holder := acquire(t, hb, request("k", grant(t, hb, 30*time.Second), "H"))
	ctx := testCtx(t, waitBound)
	w1 := start(ctx, b1, request("k", grant(t, b1, 30*time.Second), "W1"))
	awaitCount(t, operator, prefix, 2)
	w2 := start(ctx, b2, request("k", grant(t, b2, 30*time.Second), "W2"))
	awaitCount(t, operator, prefix, 3)
	q2.awaitWatch(t, "W2")

	require.NoError(t, hb.Release(testCtx(t, waitBound), holder))
	r1 := await(t, w1, "W1 after H's release")
	require.NoError(t, r1.err)
	notYet(t, w2, "W2 behind W1")
	require.NoError(t, b1.Release(testCtx(t, waitBound), r1.claim))
	r2 := await(t, w2, "W2 after W1's release")
	require.NoError(t, r2.err)
	require.Greater(t, r2.claim.Token, r1.claim.Token)

	require.EqualValues(t, 1, q1.n.Load(), "W1's Txns comparing the queue (H held from its enqueue)")
	require.EqualValues(t, 0, q2.n.Load(), "W2's Txns comparing the queue (W1 was admitted after waiting)")
	require.NoError(t, b2.Release(testCtx(t, waitBound), r2.claim))
}

// A predecessor that goes without having held proves nothing: a waiter
// whose predecessor's wait was cancelled, or which was deleted by an
// operator, checks the whole queue and goes on waiting for the holder
// ahead of both.
func TestWaiterBehindPredecessorThatNeverHeldKeepsWaiting(t *testing.T) {
	tests := []struct {
		name   string
		remove func(t *testing.T, cancel context.CancelFunc, operator *clientv3.Client, key string)
	}{
		{"Cancelled", func(t *testing.T, cancel context.CancelFunc, _ *clientv3.Client, _ string) { cancel() }},
		{"DeletedByOperator", func(t *testing.T, _ context.CancelFunc, operator *clientv3.Client, key string) {
			_, err := operator.Delete(testCtx(t, waitBound), key)
			require.NoError(t, err)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			hb, operator := newBackend(t, shared, prefix)
			b1, _ := newBackend(t, shared, prefix)
			var q2 queueCompares
			b2, _ := newBackend(t, shared, prefix, q2.configure)
			holder := acquire(t, hb, request("k", grant(t, hb, 30*time.Second), "H"))
			ctx := testCtx(t, waitBound)
			ctx1, cancel1 := context.WithCancel(ctx)
			defer cancel1()
			w1 := start(ctx1, b1, request("k", grant(t, b1, 30*time.Second), "W1"))
			awaitCount(t, operator, prefix, 2)
			w1Key := claimKeyOtherThan(t, operator, prefix, hb.ClaimKey(holder))
			w2 := start(ctx, b2, request("k", grant(t, b2, 30*time.Second), "W2"))
			awaitCount(t, operator, prefix, 3)
			q2.awaitWatch(t, "W2")

			tt.remove(t, cancel1, operator, w1Key)
			r1 := await(t, w1, "W1 after its claim went")
			require.Error(t, r1.err)
			// W2 wakes on W1's delete and checks the queue, which finds H.
			require.Eventually(t, func() bool { return q2.n.Load() == 1 }, waitBound, time.Millisecond,
				"W2's check of the queue after W1's delete")
			awaitCount(t, operator, prefix, 2)
			notYet(t, w2, "W2 behind H")

			require.NoError(t, hb.Release(testCtx(t, waitBound), holder))
			r2 := await(t, w2, "W2 after H's release")
			require.NoError(t, r2.err)
			info, err := b2.Inspect(testCtx(t, waitBound), "k")
			require.NoError(t, err)
			require.Len(t, info.Holders, 1, "W2 alone holds")
			require.Equal(t, r2.claim.Token, info.Token)
			require.Empty(t, info.Waiters)
			require.NoError(t, b2.Release(testCtx(t, waitBound), r2.claim))
		})
	}
}

// A shared predecessor proves nothing, even admitted after waiting: it may
// have held beside an older reader that still holds. A writer queued
// behind two readers, which waited together behind a writer and were
// admitted together, wakes when the second reader goes and keeps waiting
// for the first.
func TestWriterBehindAdmittedReaderWaitsForOlderReader(t *testing.T) {
	prefix := uniquePrefix(t)
	hb, operator := newBackend(t, shared, prefix)
	rb, _ := newBackend(t, shared, prefix)
	var qx queueCompares
	xb, _ := newBackend(t, shared, prefix, qx.configure)
	holder := acquire(t, hb, request("k", grant(t, hb, 30*time.Second), "H"))
	ctx := testCtx(t, waitBound)
	rl := grant(t, rb, 30*time.Second)
	var readers []<-chan result
	for i, owner := range []string{"R1", "R2"} {
		r := request("k", rl, owner)
		r.Shared = true
		readers = append(readers, start(ctx, rb, r))
		awaitCount(t, operator, prefix, int64(i+2))
	}
	x := start(ctx, xb, request("k", grant(t, xb, 30*time.Second), "X"))
	awaitCount(t, operator, prefix, 4)
	qx.awaitWatch(t, "X")

	require.NoError(t, hb.Release(testCtx(t, waitBound), holder))
	r1 := await(t, readers[0], "R1 after H's release")
	require.NoError(t, r1.err)
	r2 := await(t, readers[1], "R2 after H's release")
	require.NoError(t, r2.err)
	require.NoError(t, rb.Release(testCtx(t, waitBound), r2.claim))
	// X wakes on R2's delete and checks the whole queue, which finds R1.
	require.Eventually(t, func() bool { return qx.n.Load() == 1 }, waitBound, time.Millisecond,
		"X's check of the queue after R2's delete")
	notYet(t, x, "X behind R1")

	require.NoError(t, rb.Release(testCtx(t, waitBound), r1.claim))
	rx := await(t, x, "X after R1's release")
	require.NoError(t, rx.err)
	require.NoError(t, xb.Release(testCtx(t, waitBound), rx.claim))
}
