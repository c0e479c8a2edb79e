package etcdbackend_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/ash-lock/ashlock/backend"
)

// A counted lock's first waiter waits for any of its n holders with one
// watch of the queue directory, not one watch per holder: with 8 permits,
// an admission creates at most two watches (the admitted claim's loss
// watch, and the next waiter's directory watch as the new first waiter)
// and costs the same requests and events as with 2.
//
// Besides those, a waiting claim starts its own loss watch once it has
// waited for a second, whatever the admissions do; on a slow run the
// second waiter reaches that inside the window. The watches created are
// therefore told apart by key and kind, and that one is allowed for.
func TestCountedFirstWaiterWatchesOnce(t *testing.T) {
	prefix := uniquePrefix(t)
	var wc watchCounter
	var wl watchLog
	b, cli := newBackend(t, shared, prefix, wc.configure, wl.configure)
	l := grant(t, b, 30*time.Second)
	dir := prefix + "claims/k/"
	const n, waiters = 8, 2
	var holders []backend.Claim
	held := make(map[string]bool)
	for i := range n {
		c := acquire(t, b, countedReq("k", l, fmt.Sprint("h", i), n))
		holders = append(holders, c)
		held[b.ClaimKey(c)] = true
	}
	chs := queueCounted(testCtx(t, waitBound), t, b, cli, dir, l, n, waiters)
	claims := claimsByAge(t, cli, dir)
	require.Len(t, claims, n+waiters)
	first, second := claims[n], claims[n+1]
	kindOf := func(cr *pb.WatchCreateRequest) string {
		key := string(cr.Key)
		deletes := slices.Equal(cr.Filters, []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT})
		switch {
		case key == dir && len(cr.RangeEnd) > 0:
			return "directory"
		case held[key]:
			return "holder " + key
		case key == first && deletes:
			return "first's loss"
		case key == second && deletes:
			return "second's loss"
		case key == first:
			return "second's watch of first"
		}
		return "other " + key
	}

	// Settled: every holder's loss watch, the first waiter's directory
	// watch and the second waiter's watch of the first waiter's claim.
	before := wl.await(t, "the queue's watches", func(creates []*pb.WatchCreateRequest) bool {
		kinds := make(map[string]int)
		for _, cr := range creates {
			kinds[kindOf(cr)]++
		}
		for k := range held {
			if kinds["holder "+k] == 0 {
				return false
			}
		}
		return kinds["directory"] > 0 && kinds["second's watch of first"] > 0
	})
	checks, events := wc.checks(), wc.events.Load()
	release(t, b, holders[3])
	r := await(t, chs[0], "first waiter")
	require.NoError(t, r.err)
	assert.Equal(t, 3, r.claim.Permit)
	// The second waiter, first now, watches the directory.
	wl.await(t, "the second waiter's directory watch", func(creates []*pb.WatchCreateRequest) bool {
		return slices.ContainsFunc(creates[before:], func(cr *pb.WatchCreateRequest) bool { return kindOf(cr) == "directory" })
	})
	notYet(t, chs[1], "second waiter")

	created := make(map[string]int)
	for _, cr := range wl.since(before) {
		created[kindOf(cr)]++
	}
	ownLoss := created["second's loss"]
	assert.LessOrEqual(t, ownLoss, 1, "the second waiter's loss watch")
	assert.Equal(t, 1, created["directory"], "directory watches: the second waiter's")
	assert.LessOrEqual(t, created["first's loss"], 1, "the admitted claim's loss watch")
	delete(created, "second's loss")
	delete(created, "directory")
	delete(created, "first's loss")
	assert.Empty(t, created, "other watches created (of holders, or of the first waiter by the second)")
	assert.LessOrEqual(t, len(wl.since(before))-ownLoss, 2, "watches created for the admission")
	// The release; the first waiter's check and permit Txns; the second
	// waiter's check (reads that start loss watches are left out, see
	// checks).
	assert.LessOrEqual(t, wc.checks()-checks, int64(4), "requests")
	assert.LessOrEqual(t, wc.events.Load()-events, int64(3), "watch events")

	release(t, b, r.claim)
	r = await(t, chs[1], "second waiter")
	require.NoError(t, r.err)
	assert.Equal(t, 3, r.claim.Permit)
	release(t, b, r.claim)
	for i, c := range holders {
		if i != 3 {
			release(t, b, c)
		}
	}
}

// claimsByAge lists the etcd keys of the claims in dir, oldest first.
func claimsByAge(t testing.TB, cli *clientv3.Client, dir string) []string {
	t.Helper()
	resp, err := cli.Get(testCtx(t, waitBound), dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	require.NoError(t, err)
	out := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = string(kv.Key)
	}
	return out
}

// watchLog records, through a gRPC interceptor on one client, the watch
// create requests it sends, in order.
type watchLog struct {
	mu      sync.Mutex
	creates []*pb.WatchCreateRequest
	changed chan struct{} // closed and replaced at each create
}

// configure installs the interceptor; pass it to Cluster.Client.
func (w *watchLog) configure(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
			streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || method != watchMethod {
				return s, err
			}
			return &createHook{ClientStream: s, onCreate: w.add}, nil
		}))
}

func (w *watchLog) add(cr *pb.WatchCreateRequest) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.creates = append(w.creates, cr)
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
}

// since returns the creates sent after the first i.
func (w *watchLog) since(i int) []*pb.WatchCreateRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.creates[i:])
}

// await waits up to waitBound until ok holds for the creates sent so far,
// and returns how many there were then.
func (w *watchLog) await(t testing.TB, what string, ok func([]*pb.WatchCreateRequest) bool) int {
	t.Helper()
	deadline := time.After(waitBound)
	for {
		w.mu.Lock()
		creates := slices.Clone(w.creates)
		if w.changed == nil {
			w.changed = make(chan struct{})
		}
		changed := w.changed
		w.mu.Unlock()
		if ok(creates) {
			return len(creates)
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%s: not among the %d watches created within %v", what, len(creates), waitBound)
		}
	}
}

// next returns how many creates have been sent so far: the since to pass
// to awaitKeyWatches, taken before starting what is to create the watches.
func (w *watchLog) next() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.creates)
}

// awaitKeyWatches waits up to waitBound until n watches of key alone have
// been created since the since-th create, and returns how many creates
// there were then.
//
// A waiter creates its watch of the claim it waits behind only once its
// enqueue's reply is in and it has decided to wait, so that create tells
// that it has settled. The same create request is sent by other watches
// of key, which n must count: a claim's own loss watch, which a holder
// starts holdDelay (5 ms) after it is handed out and a waiter once it has
// waited for a second.
func (w *watchLog) awaitKeyWatches(t testing.TB, what string, since int, key string, n int) int {
	t.Helper()
	return w.await(t, what, func(creates []*pb.WatchCreateRequest) bool {
		return countCreates(creates[since:], func(cr *pb.WatchCreateRequest) bool { return watchesKey(cr, key) }) >= n
	})
}

// countCreates counts the creates for which ok holds.
func countCreates(creates []*pb.WatchCreateRequest, ok func(*pb.WatchCreateRequest) bool) int {
	n := 0
	for _, cr := range creates {
		if ok(cr) {
			n++
		}
	}
	return n
}

// watchesKey reports whether cr watches key alone.
func watchesKey(cr *pb.WatchCreateRequest, key string) bool {
	return string(cr.Key) == key && len(cr.RangeEnd) == 0
}

// watchesDir reports whether cr watches the queue directory dir: a
// counted claim's first waiter watches its holders so.
func watchesDir(cr *pb.WatchCreateRequest, dir string) bool {
	return string(cr.Key) == dir && len(cr.RangeEnd) > 0
}
