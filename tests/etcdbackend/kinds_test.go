package etcdbackend_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
)

// Shared, counted and multi-key claims on etcd (the queue model of
// backend.AcquireRequest).

func sharedReq(key string, l backend.Lease, owner string) backend.AcquireRequest {
	r := request(key, l, owner)
	r.Shared = true
	return r
}

func countedReq(key string, l backend.Lease, owner string, n int) backend.AcquireRequest {
	r := request(key, l, owner)
	r.Permits = n
	return r
}

func release(t testing.TB, b backend.Backend, c backend.Claim) {
	t.Helper()
	require.NoError(t, b.Release(testCtx(t, waitBound), c))
}

// Readers hold together; a writer queued behind them waits for all of
// them, and a reader queued behind the writer waits for the writer (so
// readers never starve a writer).
func TestSharedReadersHoldTogether(t *testing.T) {
	prefix := uniquePrefix(t)
	var wl watchLog
	b, cli := newBackend(t, shared, prefix, wl.configure)
	l := grant(t, b, 30*time.Second)
	since := wl.next()
	var readers []backend.Claim
	for i := range 3 {
		c := acquire(t, b, sharedReq("k", l, fmt.Sprintf("r%d", i)))
		assert.True(t, c.Shared)
		readers = append(readers, c)
	}
	info, err := b.Inspect(testCtx(t, waitBound), "k")
	require.NoError(t, err)
	require.Len(t, info.Holders, 3)
	assert.Equal(t, readers[0].Token, info.Token)
	for i, h := range info.Holders {
		assert.True(t, h.Shared)
		assert.Equal(t, readers[i].Token, h.Token)
	}
	assert.Equal(t, 1, info.Permits)

	ctx := testCtx(t, waitBound)
	writer := start(ctx, b, request("k", l, "w"))
	awaitCount(t, cli, prefix+"claims/k/", 4)
	late := start(ctx, b, sharedReq("k", l, "late"))
	awaitCount(t, cli, prefix+"claims/k/", 5)
	// Both have settled: the writer watches the newest reader's claim
	// (as that reader's own loss watch does), the late reader the
	// writer's.
	writerKey := claimsByAge(t, cli, prefix+"claims/k/")[3]
	wl.awaitKeyWatches(t, "the writer's watch of the newest reader", since, b.ClaimKey(readers[2]), 2)
	wl.awaitKeyWatches(t, "the late reader's watch of the writer", since, writerKey, 1)
	notYet(t, writer, "writer behind readers")
	notYet(t, late, "reader behind a writer")
	info, err = b.Inspect(testCtx(t, waitBound), "k")
	require.NoError(t, err)
	require.Len(t, info.Waiters, 2)
	assert.False(t, info.Waiters[0].Shared)
	assert.True(t, info.Waiters[1].Shared)

	for _, r := range readers {
		release(t, b, r)
	}
	w := await(t, writer, "writer")
	require.NoError(t, w.err)
	// A grace window, not a wait for an event: nothing reaches the late
	// reader here (its watch is of the writer's claim, which stays), so
	// there is nothing to wait on; 50 ms give a wrong admission time to
	// show.
	time.Sleep(50 * time.Millisecond)
	notYet(t, late, "reader behind the holding writer")
	release(t, b, w.claim)
	r := await(t, late, "late reader")
	require.NoError(t, r.err)
	assert.Greater(t, r.claim.Token, w.claim.Token)
	release(t, b, r.claim)
}

// A writer's release admits every reader queued up to the next writer at
// once, each woken by one watch event on its own watch of the writer, and
// each with a constant number of requests.
func TestWriterReleaseWakesReaders(t *testing.T) {
	prefix := uniquePrefix(t)
	var wc watchCounter
	var wl watchLog
	b, cli := newBackend(t, shared, prefix, wc.configure, wl.configure)
	l := grant(t, b, 30*time.Second)
	dir := prefix + "claims/k/"
	since := wl.next()
	w := acquire(t, b, request("k", l, "w1"))
	ctx := testCtx(t, waitBound)
	const readers = 5
	var chs []<-chan result
	for i := range readers {
		chs = append(chs, start(ctx, b, sharedReq("k", l, fmt.Sprintf("r%d", i))))
		awaitCount(t, cli, dir, int64(i+2))
	}
	w2 := start(ctx, b, request("k", l, "w2"))
	awaitCount(t, cli, dir, readers+2)
	after := start(ctx, b, sharedReq("k", l, "after"))
	awaitCount(t, cli, dir, readers+3)
	// Every waiter has settled on its watch of the claim just ahead of
	// it: each reader on the first writer's (as that writer's own loss
	// watch is), the second writer on the last reader's, the last reader
	// on the second writer's.
	claims := claimsByAge(t, cli, dir)
	require.Len(t, claims, readers+3)
	wl.awaitKeyWatches(t, "the readers' watches of the first writer", since, b.ClaimKey(w), readers+1)
	wl.awaitKeyWatches(t, "the second writer's watch of the last reader", since, claims[readers], 1)
	wl.awaitKeyWatches(t, "the last reader's watch of the second writer", since, claims[readers+1], 1)
	checks, events := wc.checks(), wc.events.Load()
	release(t, b, w)
	var got []backend.Claim
	for i, ch := range chs {
		r := await(t, ch, fmt.Sprintf("reader %d", i))
		require.NoError(t, r.err)
		got = append(got, r.claim)
	}
	// The release, and per reader one check Txn (the reads that start
	// loss watches are left out, see checks); one event per reader, and
	// at most one for the writer's own loss watch: Release cancels that
	// watch on the watch stream before it sends the delete, but etcd
	// may apply the delete before it reads the cancel, and then sends
	// the event anyway. Nothing reaches the second writer or the last
	// reader.
	assert.LessOrEqual(t, wc.checks()-checks, int64(1+readers), "requests")
	assert.LessOrEqual(t, wc.events.Load()-events, int64(readers+1), "watch events")
	// A grace window, not a wait for an event: nothing reaches the second
	// writer or the last reader here (their watches are of claims that
	// stay), so there is nothing to wait on; 50 ms give a wrong admission
	// time to show.
	time.Sleep(50 * time.Millisecond)
	notYet(t, w2, "second writer")
	notYet(t, after, "reader behind the second writer")
	for _, c := range got {
		release(t, b, c)
	}
	r := await(t, w2, "second writer")
	require.NoError(t, r.err)
	release(t, b, r.claim)
	r = await(t, after, "last reader")
	require.NoError(t, r.err)
	release(t, b, r.claim)
}

// At most n counted claims hold at once, with distinct permits, and the
// tokens of each permit increase, whether they queue or not.
func TestCountedPermits(t *testing.T) {
	prefix := uniquePrefix(t)
	b, _ := newBackend(t, shared, prefix)
	other, _ := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	lo := grant(t, other, 30*time.Second)
	const n, workers, rounds = 3, 6, 8
	var (
		mu      sync.Mutex
		holding = map[int]uint64{}
		last    = map[int]uint64{}
		maxHeld int
	)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			be, le := b, l
			if i%2 == 1 {
				be, le = other, lo
			}
			for j := range rounds {
				req := countedReq("k", le, fmt.Sprintf("w%d-%d", i, j), n)
				req.Fair = (i+j)%3 != 2 // some wait outside the queue
				c, err := be.Acquire(testCtx(t, waitBound), req)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if _, dup := holding[c.Permit]; dup || c.Permit < 0 || c.Permit >= n {
					errs <- fmt.Errorf("permit %d given twice or out of range", c.Permit)
				}
				if c.Token <= last[c.Permit] {
					errs <- fmt.Errorf("permit %d: token %d after %d", c.Permit, c.Token, last[c.Permit])
				}
				holding[c.Permit], last[c.Permit] = c.Token, c.Token
				maxHeld = max(maxHeld, len(holding))
				mu.Unlock()
				time.Sleep(time.Millisecond) // the scenario: hold a while, so that holders overlap
				mu.Lock()
				delete(holding, c.Permit)
				mu.Unlock()
				if err := be.Release(testCtx(t, waitBound), c); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.LessOrEqual(t, maxHeld, n)
}

// Admitting a counted waiter costs a constant number of requests however
// many claims wait behind it: a release wakes the first waiter only, and
// its admission the next one only.
func TestCountedAdmissionCost(t *testing.T) {
	for _, waiters := range []int{2, 12} {
		t.Run(fmt.Sprint(waiters), func(t *testing.T) {
			prefix := uniquePrefix(t)
			var wc watchCounter
			var wl watchLog
			b, cli := newBackend(t, shared, prefix, wc.configure, wl.configure)
			l := grant(t, b, 30*time.Second)
			dir := prefix + "claims/k/"
			const n = 2
			var holders []backend.Claim
			for i := range n {
				c := acquire(t, b, countedReq("k", l, fmt.Sprint("h", i), n))
				assert.Equal(t, i, c.Permit)
				holders = append(holders, c)
			}
			chs := queueCounted(testCtx(t, waitBound), t, b, cli, dir, l, n, waiters)
			claims := claimsByAge(t, cli, dir)
			require.Len(t, claims, n+waiters)
			// Every waiter has settled: after its enqueue it read the
			// queue (a check) and watches, the first one the directory
			// for its holders' deletes, each other one the claim just
			// ahead of it for its permit's record (with puts, which a
			// loss watch is not).
			settled := wl.await(t, "the waiters' watches", func(creates []*pb.WatchCreateRequest) bool {
				if countCreates(creates, func(cr *pb.WatchCreateRequest) bool { return watchesDir(cr, dir) }) == 0 {
					return false
				}
				for _, ahead := range claims[n : n+waiters-1] {
					if countCreates(creates, func(cr *pb.WatchCreateRequest) bool {
						return watchesKey(cr, ahead) && len(cr.Filters) == 0
					}) == 0 {
						return false
					}
				}
				return true
			})
			checks, events := wc.checks(), wc.events.Load()
			release(t, b, holders[1])
			r := await(t, chs[0], "first waiter")
			require.NoError(t, r.err)
			assert.Equal(t, 1, r.claim.Permit)
			assert.Greater(t, r.claim.Token, holders[1].Token)
			// The next waiter settles: woken by the first one's permit
			// record, it reads the queue and, first now, watches the
			// directory.
			wl.await(t, "the second waiter's directory watch", func(creates []*pb.WatchCreateRequest) bool {
				return countCreates(creates[settled:], func(cr *pb.WatchCreateRequest) bool { return watchesDir(cr, dir) }) > 0
			})
			notYet(t, chs[1], "second waiter")
			// The release; the first waiter's check and permit Txns; the
			// second waiter's check (reads that start loss watches are
			// left out, see checks).
			assert.LessOrEqual(t, wc.checks()-checks, int64(4), "requests")
			assert.LessOrEqual(t, wc.events.Load()-events, int64(3), "watch events")
			release(t, b, r.claim)
			release(t, b, holders[0])
			for i, ch := range chs[1:] {
				r := await(t, ch, fmt.Sprint("waiter ", i+1))
				require.NoError(t, r.err)
				release(t, b, r.claim)
			}
		})
	}
}

// queueCounted starts waiters counted requests for "k" (n permits) on b
// under lease l, each once the one before it is in the queue directory
// dir behind the n claims already there, and returns their results in
// queue order. ctx bounds their waits.
func queueCounted(ctx context.Context, t *testing.T, b *etcd.Backend, cli *clientv3.Client, dir string, l backend.Lease, n, waiters int) []<-chan result {
	t.Helper()
	chs := make([]<-chan result, waiters)
	for i := range chs {
		chs[i] = start(ctx, b, countedReq("k", l, fmt.Sprint("w", i), n))
		awaitCount(t, cli, dir, int64(n+i+1))
	}
	return chs
}

// A request whose permit count differs from the queue's fails with
// ErrPermitMismatch and leaves nothing behind.
func TestPermitMismatch(t *testing.T) {
	prefix := uniquePrefix(t)
	b, cli := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	dir := prefix + "claims/k/"
	c := acquire(t, b, countedReq("k", l, "three", 3))
	for _, req := range []backend.AcquireRequest{
		request("k", l, "plain"), sharedReq("k", l, "reader"), countedReq("k", l, "two", 2),
	} {
		for _, fair := range []bool{true, false} {
			for _, wait := range []bool{true, false} {
				req.Fair, req.Wait = fair, wait
				_, err := b.Acquire(testCtx(t, waitBound), req)
				assert.ErrorIs(t, err, backend.ErrPermitMismatch, "%s fair %v wait %v", req.Owner, fair, wait)
				assert.Len(t, keys(t, cli, dir), 1)
			}
		}
	}
	c2 := acquire(t, b, countedReq("k", l, "three again", 3))
	release(t, b, c2)
	release(t, b, c)
	w := acquire(t, b, request("k", l, "writer"))
	_, err := b.Acquire(testCtx(t, waitBound), countedReq("k", l, "three", 3))
	assert.ErrorIs(t, err, backend.ErrPermitMismatch)
	assert.Len(t, keys(t, cli, dir), 1)
	release(t, b, w)
}

// A cancelled waiter of every kind leaves nothing behind.
func TestCancelledWaitersLeaveNothing(t *testing.T) {
	prefix := uniquePrefix(t)
	var wl watchLog
	b, cli := newBackend(t, shared, prefix, wl.configure)
	l := grant(t, b, 30*time.Second)
	for _, tc := range []struct {
		name         string
		holder, wait backend.AcquireRequest
	}{
		{"shared behind writer", request("a", l, "h"), sharedReq("a", l, "w")},
		{"writer behind reader", sharedReq("b", l, "h"), request("b", l, "w")},
		{"counted", countedReq("c", l, "h", 1+1), countedReq("c", l, "w", 2)},
		{"multi", request("d2", l, "h"), func() backend.AcquireRequest {
			r := request("d1", l, "w")
			r.Keys = []string{"d1", "d2"}
			return r
		}()},
		{"shared fair false", request("e", l, "h"), func() backend.AcquireRequest {
			r := sharedReq("e", l, "w")
			r.Fair = false
			return r
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			since := wl.next()
			h := acquire(t, b, tc.holder)
			if tc.holder.Permits == 2 {
				h2 := acquire(t, b, tc.holder)
				defer release(t, b, h2)
			}
			before := len(keys(t, cli, prefix))
			ctx, cancel := context.WithCancel(context.Background())
			ch := start(ctx, b, tc.wait)
			// The waiter has settled: it watches what it waits for, the
			// holder's claim (as the holder's own loss watch does), or for
			// the counted one, first behind its holders, the directory.
			if tc.holder.Permits == 2 {
				dir := prefix + "claims/" + tc.holder.Key + "/"
				wl.await(t, "the waiter's directory watch", func(creates []*pb.WatchCreateRequest) bool {
					return countCreates(creates[since:], func(cr *pb.WatchCreateRequest) bool { return watchesDir(cr, dir) }) > 0
				})
			} else {
				wl.awaitKeyWatches(t, "the waiter's watch of the holder", since, b.ClaimKey(h), 2)
			}
			notYet(t, ch, "waiter")
			cancel()
			r := await(t, ch, "cancelled waiter")
			assert.ErrorIs(t, r.err, context.Canceled)
			assert.Len(t, keys(t, cli, prefix), before)
			release(t, b, h)
		})
	}
}

// A multi-key claim is made in one Txn at every key with one token, and
// released in one.
func TestMultiKeyOneTxn(t *testing.T) {
	prefix := uniquePrefix(t)
	var wc watchCounter
	var wl watchLog
	b, cli := newBackend(t, shared, prefix, wc.configure, wl.configure)
	l := grant(t, b, 30*time.Second)
	all := numberedKeys(backend.MaxKeys)
	for _, kind := range []string{"exclusive", "shared"} {
		t.Run(kind, func(t *testing.T) {
			req := request(all[0], l, "all")
			req.Keys, req.Shared = all, kind == "shared"
			before := wc.unary.Load()
			c := acquire(t, b, req)
			assert.Equal(t, int64(1), wc.unary.Load()-before, "requests to take %d keys", len(all))
			assert.Equal(t, all, c.Keys)
			for _, k := range all {
				resp, err := cli.Get(testCtx(t, waitBound), prefix+"claims/"+k+"/"+c.ID)
				require.NoError(t, err)
				require.Len(t, resp.Kvs, 1, k)
				assert.Equal(t, int64(c.Token), resp.Kvs[0].CreateRevision, k)
			}
			info, err := b.Inspect(testCtx(t, waitBound), all[63])
			require.NoError(t, err)
			assert.Equal(t, c.Token, info.Token)
			require.NoError(t, b.SetValue(testCtx(t, waitBound), c, []byte("v")))
			info, err = b.Inspect(testCtx(t, waitBound), all[17])
			require.NoError(t, err)
			assert.Equal(t, []byte("v"), info.Holders[0].Value)
			before = wc.unary.Load()
			release(t, b, c)
			assert.Equal(t, int64(1), wc.unary.Load()-before, "requests to release")
			assert.Empty(t, keys(t, cli, prefix+"claims/"))
		})
	}
	// Contended, stamped, and not queued, at the limit of etcd's default
	// max-txn-ops.
	for i, shared := range []bool{false, true} {
		since := wl.next()
		h := acquire(t, b, request(all[40], l, "h"))
		req := request(all[0], l, "all")
		req.Keys, req.Shared = all, shared
		req.Stamp = nextStamp
		ch := start(testCtx(t, waitBound), b, req)
		// It has settled: holding every other key since its enqueue, it
		// watches the holder's claim at all[40] (as the holder's own loss
		// watch does).
		wl.awaitKeyWatches(t, "the multi-key claim's watch of the holder", since, b.ClaimKey(h), 2)
		notYet(t, ch, "multi behind a holder")
		release(t, b, h)
		r := await(t, ch, "multi")
		require.NoError(t, r.err)
		assert.Equal(t, int64(2*i+1), r.claim.Stamp.WallTime)
		release(t, b, r.claim)
		try := req
		try.Wait = false
		c, err := b.Acquire(testCtx(t, waitBound), try)
		require.NoError(t, err)
		assert.Equal(t, int64(2*i+2), c.Stamp.WallTime)
		w := request(all[63], l, "writer")
		w.Wait = false
		_, err = b.Acquire(testCtx(t, waitBound), w)
		assert.ErrorIs(t, err, backend.ErrLocked)
		if shared {
			try.Stamp = nil
			c2, err := b.Acquire(testCtx(t, waitBound), try)
			require.NoError(t, err, "readers share every key")
			release(t, b, c2)
		}
		release(t, b, c)
	}
}

// Overlapping multi-key requests listing their keys in any order, mixed
// with plain ones, never deadlock, and never hold a key together.
func TestMultiKeyNoDeadlock(t *testing.T) {
	prefix := uniquePrefix(t)
	b, _ := newBackend(t, shared, prefix)
	other, _ := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	lo := grant(t, other, 30*time.Second)
	sets := [][]string{{"a", "b"}, {"b", "c"}, {"a", "c"}, {"a", "b", "c"}, {"c"}, {"a"}}
	var mu sync.Mutex
	held := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, len(sets))
	for i, set := range sets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			be, le := b, l
			if i%2 == 1 {
				be, le = other, lo
			}
			keys := append([]string(nil), set...)
			sort.Strings(keys)
			for j := range 6 {
				req := request(keys[0], le, fmt.Sprint(i))
				if len(keys) > 1 {
					req.Keys = keys
				}
				req.Fair = j%3 != 2
				c, err := be.Acquire(testCtx(t, waitBound), req)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, k := range keys {
					if held[k] {
						errs <- fmt.Errorf("%s held twice", k)
					}
					held[k] = true
				}
				mu.Unlock()
				time.Sleep(time.Millisecond) // the scenario: hold a while, so that holders overlap
				mu.Lock()
				for _, k := range keys {
					held[k] = false
				}
				mu.Unlock()
				if err := be.Release(testCtx(t, waitBound), c); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// SetValue rewrites the value of a live claim, which Inspect shows with
// the rest of the record, and changes nothing once the claim is gone.
func TestSetValue(t *testing.T) {
	prefix := uniquePrefix(t)
	b, _ := newBackend(t, shared, prefix)
	other, _ := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	req := countedReq("k", l, "me", 2)
	req.Value = []byte("first")
	c := acquire(t, b, req)
	assert.Equal(t, []byte("first"), c.Value)
	require.NoError(t, b.SetValue(testCtx(t, waitBound), c, []byte("second")))
	info, err := b.Inspect(testCtx(t, waitBound), "k")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	h := info.Holders[0]
	assert.Equal(t, []byte("second"), h.Value)
	assert.Equal(t, "me", h.Owner)
	assert.Equal(t, c.Token, h.Token)
	assert.Equal(t, 2, info.Permits)
	// Through a Backend that did not hand the claim out.
	require.NoError(t, other.SetValue(testCtx(t, waitBound), c, []byte("third")))
	info, err = b.Inspect(testCtx(t, waitBound), "k")
	require.NoError(t, err)
	assert.Equal(t, []byte("third"), info.Holders[0].Value)
	assert.Equal(t, "me", info.Holders[0].Owner)

	require.NoError(t, b.Revoke(testCtx(t, waitBound), l.ID))
	err = b.SetValue(testCtx(t, waitBound), c, []byte("late"))
	assert.ErrorIs(t, err, backend.ErrLeaseExpired)
	err = other.SetValue(testCtx(t, waitBound), c, []byte("late"))
	assert.ErrorIs(t, err, backend.ErrLeaseExpired)
	info, err = b.Inspect(testCtx(t, waitBound), "k")
	require.NoError(t, err)
	assert.False(t, info.Held)
}

// TryAcquire of each kind succeeds only when a claim made now would hold,
// and otherwise leaves nothing behind.
func TestTryAcquireKinds(t *testing.T) {
	prefix := uniquePrefix(t)
	var wl watchLog
	b, cli := newBackend(t, shared, prefix, wl.configure)
	l := grant(t, b, 30*time.Second)
	try := func(r backend.AcquireRequest) (backend.Claim, error) {
		r.Wait = false
		return b.Acquire(testCtx(t, waitBound), r)
	}
	r1, err := try(sharedReq("s", l, "r1"))
	require.NoError(t, err)
	r2, err := try(sharedReq("s", l, "r2"))
	require.NoError(t, err)
	_, err = try(request("s", l, "w"))
	assert.ErrorIs(t, err, backend.ErrLocked)
	assert.Len(t, keys(t, cli, prefix+"claims/s/"), 2)
	release(t, b, r1)
	release(t, b, r2)

	var cs []backend.Claim
	for i := range 3 {
		c, err := try(countedReq("c", l, "c", 3))
		require.NoError(t, err)
		assert.Equal(t, i, c.Permit)
		cs = append(cs, c)
	}
	_, err = try(countedReq("c", l, "c", 3))
	assert.ErrorIs(t, err, backend.ErrLocked)
	assert.Len(t, keys(t, cli, prefix+"claims/c/"), 3)
	release(t, b, cs[1])
	c, err := try(countedReq("c", l, "c", 3))
	require.NoError(t, err)
	assert.Equal(t, 1, c.Permit)
	assert.Greater(t, c.Token, cs[2].Token)
	for _, c := range []backend.Claim{cs[0], cs[2], c} {
		release(t, b, c)
	}
	// A counted request that does not queue waits for a permit.
	since := wl.next()
	full := make([]backend.Claim, 2)
	for i := range full {
		full[i] = acquire(t, b, countedReq("f", l, "f", 2))
	}
	nf := countedReq("f", l, "nf", 2)
	nf.Fair = false
	ch := start(testCtx(t, waitBound), b, nf)
	// It has settled: it watches both holders' claims (as their own loss
	// watches do).
	for _, c := range full {
		wl.awaitKeyWatches(t, "the unfair counted request's watch of a holder", since, b.ClaimKey(c), 2)
	}
	notYet(t, ch, "unfair counted")
	release(t, b, full[0])
	r := await(t, ch, "unfair counted")
	require.NoError(t, r.err)
	assert.Equal(t, 0, r.claim.Permit)
	release(t, b, r.claim)
	release(t, b, full[1])
}

// The loss of a multi-key claim at any one key is reported once.
func TestMultiKeyLoss(t *testing.T) {
	prefix := uniquePrefix(t)
	var wl watchLog
	b, cli := newBackend(t, shared, prefix, wl.configure)
	l := grant(t, b, 30*time.Second)
	lost := make(chan error, 2)
	req := request("a", l, "m")
	req.Keys = []string{"a", "b", "c"}
	req.OnLost = backend.LossFunc(func(err error) { lost <- err })
	since := wl.next()
	c := acquire(t, b, req)
	for _, k := range req.Keys { // its loss watches start, one per key
		wl.awaitKeyWatches(t, "the claim's loss watch at "+k, since, prefix+"claims/"+k+"/"+c.ID, 1)
	}
	_, err := cli.Delete(testCtx(t, waitBound), prefix+"claims/b/"+c.ID)
	require.NoError(t, err)
	select {
	case err := <-lost:
		assert.ErrorIs(t, err, backend.ErrLeaseExpired)
	case <-time.After(waitBound):
		t.Fatal("loss not reported")
	}
	_, err = cli.Delete(testCtx(t, waitBound), prefix+"claims/c/"+c.ID)
	require.NoError(t, err)
	// A grace window, not a wait for an event: a second report must not
	// come, so there is nothing to wait on; 50 ms give it time to show.
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-lost:
		t.Fatalf("loss reported twice: %v", err)
	default:
	}
	err = b.SetValue(testCtx(t, waitBound), c, []byte("x"))
	assert.True(t, errors.Is(err, backend.ErrLeaseExpired), "%v", err)
	release(t, b, c)
	assert.Empty(t, keys(t, cli, prefix+"claims/"))
}

// The holders of a shared or counted key stamp concurrently; the stamp
// record keeps the highest of their stamps, so the next holder sees it.
func TestStampRecordOnlyRises(t *testing.T) {
	prefix := uniquePrefix(t)
	b, _ := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	fixed := func(wall int64, seen *backend.Timestamp) func(backend.Timestamp) (backend.Timestamp, error) {
		return func(prev backend.Timestamp) (backend.Timestamp, error) {
			*seen = prev
			return backend.Timestamp{WallTime: wall}, nil
		}
	}
	for _, multi := range []bool{false, true} {
		key := fmt.Sprint("k", multi)
		mk := func(r backend.AcquireRequest) backend.AcquireRequest {
			if multi {
				r.Keys = []string{key, key + "z"}
			}
			return r
		}
		var seenA, seenB, seenW backend.Timestamp
		ra := mk(sharedReq(key, l, "a"))
		ra.Stamp = fixed(100, &seenA)
		a := acquire(t, b, ra)
		rb := mk(sharedReq(key, l, "b"))
		rb.Stamp = fixed(50, &seenB) // a clock behind a's
		bc := acquire(t, b, rb)
		assert.Equal(t, int64(100), seenB.WallTime)
		release(t, b, a)
		release(t, b, bc)
		rw := mk(request(key, l, "w"))
		rw.Stamp = fixed(200, &seenW)
		w := acquire(t, b, rw)
		assert.Equal(t, int64(100), seenW.WallTime, "multi %v", multi)
		release(t, b, w)
	}
}

// Uncontended, every kind takes one round trip to acquire and one to
// release; a counted claim alone records permit 0 in its enqueue.
func TestKindsUncontendedRoundTrips(t *testing.T) {
	prefix := uniquePrefix(t)
	var wc watchCounter
	b, _ := newBackend(t, shared, prefix, wc.configure)
	l := grant(t, b, 30*time.Second)
	multi := request("m1", l, "multi")
	multi.Keys = []string{"m1", "m2", "m3"}
	for _, req := range []backend.AcquireRequest{
		request("x", l, "exclusive"), sharedReq("s", l, "shared"), countedReq("c", l, "counted", 4), multi,
	} {
		for _, fair := range []bool{true, false} {
			for _, wait := range []bool{true, false} {
				req.Fair, req.Wait = fair, wait
				before := wc.unary.Load()
				c := acquire(t, b, req)
				assert.Equal(t, int64(1), wc.unary.Load()-before, "%s fair %v wait %v: requests to acquire", req.Owner, fair, wait)
				assert.Equal(t, 0, c.Permit)
				before = wc.unary.Load()
				release(t, b, c)
				assert.Equal(t, int64(1), wc.unary.Load()-before, "%s: requests to release", req.Owner)
			}
		}
	}
}

// Inspect lists a counted key's holders with their permits and values,
// and its waiters.
func TestInspectCountedHolders(t *testing.T) {
	prefix := uniquePrefix(t)
	b, cli := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	var cs []backend.Claim
	for i := range 2 {
		r := countedReq("k", l, fmt.Sprint("h", i), 2)
		r.Value = []byte(fmt.Sprint("v", i))
		cs = append(cs, acquire(t, b, r))
	}
	ch := start(testCtx(t, waitBound), b, countedReq("k", l, "w", 2))
	awaitCount(t, cli, prefix+"claims/k/", 3)
	info, err := b.Inspect(testCtx(t, waitBound), "k")
	require.NoError(t, err)
	assert.True(t, info.Held)
	assert.Equal(t, 2, info.Permits)
	require.Len(t, info.Holders, 2)
	for i, h := range info.Holders {
		assert.Equal(t, cs[i].Token, h.Token)
		assert.Equal(t, i, h.Permit)
		assert.Equal(t, fmt.Sprint("h", i), h.Owner)
		assert.Equal(t, []byte(fmt.Sprint("v", i)), h.Value)
		assert.False(t, h.Shared)
		assert.False(t, h.AcquiredAt.IsZero())
	}
	assert.Equal(t, cs[0].Token, info.Token)
	require.Len(t, info.Waiters, 1)
	assert.Equal(t, "w", info.Waiters[0].Owner)
	release(t, b, cs[0])
	r := await(t, ch, "waiter")
	require.NoError(t, r.err)
	assert.Equal(t, 0, r.claim.Permit)
	info, err = b.Inspect(testCtx(t, waitBound), "k")
	require.NoError(t, err)
	require.Len(t, info.Holders, 2)
	assert.Equal(t, cs[1].Token, info.Token, "the oldest holder")
	assert.Equal(t, 0, info.Holders[1].Permit)
	release(t, b, cs[1])
	release(t, b, r.claim)
}
