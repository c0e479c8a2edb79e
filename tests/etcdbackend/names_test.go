package etcdbackend_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
)

// Claim names are named after their lease and reused: a key taken over and
// over, by every kind of request, creates a handful of names in etcd, not
// one per acquisition, and that handful does not grow with the number of
// acquisitions. Tokens still strictly increase, and a late Release of an
// earlier claim under the reused name leaves the current one alone.
func TestNamesReusedAcrossAcquisitions(t *testing.T) {
	prefix := uniquePrefix(t)
	var wl watchLog
	b, cli := newBackend(t, shared, prefix, wl.configure)
	other, _ := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	lo := grant(t, other, 30*time.Second)
	dir := prefix + "claims/k/"
	names := newNameLog(t, cli, prefix)

	var (
		tokens []uint64
		ids    = map[string]bool{}
		first  backend.Claim
	)
	cycle := func(i int) {
		// Fair and non-fair takes, each with a TryAcquire that finds the
		// key held.
		r := request("k", l, "cycle")
		r.Fair = i%2 == 0
		c := acquire(t, b, r)
		if i == 0 {
			first = c
		}
		tokens = append(tokens, c.Token)
		ids[c.ID] = true
		tryHeldThenRelease(t, b, l, c, i)
		if i%5 != 4 {
			return
		}
		// A wait behind another Backend's holder, cancelled.
		h := acquire(t, other, request("k", lo, "other"))
		ctx, cancel := context.WithCancel(context.Background())
		sent := len(wl.since(0))
		w := start(ctx, b, request("k", l, "cancelled"))
		// Cancel once the waiter watches the holder, which it does only
		// after the enqueue's reply: cancelled with the reply still on
		// its way, the claim's outcome would be unknown to b, and its
		// name rightly kept until the lease ends.
		wl.await(t, "the waiter's watch of the holder", func(creates []*pb.WatchCreateRequest) bool {
			return slices.ContainsFunc(creates[sent:], func(cr *pb.WatchCreateRequest) bool { return string(cr.Key) == dir+h.ID })
		})
		cancel()
		if res := await(t, w, "cancelled wait"); !errors.Is(res.err, context.Canceled) {
			t.Fatalf("cycle %d: cancelled wait: %v, want context.Canceled", i, res.err)
		}
		if err := other.Release(testCtx(t, waitBound), h); err != nil {
			t.Fatal(err)
		}
	}

	const short, long = 10, 50
	for i := range short {
		cycle(i)
	}
	afterShort := names.created(t, dir)
	// The current holder reuses the first claim's name; releasing the
	// first claim again must not touch it.
	c := acquire(t, b, request("k", l, "holder"))
	if c.ID != first.ID {
		t.Fatalf("sequential acquisitions used names %q and %q; want the name reused", first.ID, c.ID)
	}
	if err := b.Release(testCtx(t, waitBound), first); err != nil {
		t.Fatalf("late Release of an earlier claim under the same name: %v", err)
	}
	if info, err := b.Inspect(testCtx(t, waitBound), "k"); err != nil || !info.Held || info.Token != c.Token {
		t.Fatalf("after a late Release of an earlier incarnation: %+v, %v; want held with token %d", info, err, c.Token)
	}
	tokens = append(tokens, c.Token)
	if err := b.Release(testCtx(t, waitBound), c); err != nil {
		t.Fatal(err)
	}
	for i := short; i < long; i++ {
		cycle(i)
	}
	afterLong := names.created(t, dir)

	// b needs one name (its acquisitions of k never overlap in etcd: the
	// TryAcquire creates nothing), other one more.
	if len(afterShort) > 2 || len(afterLong) != len(afterShort) {
		t.Fatalf("claim names created after %d cycles: %d %q; after %d: %d %q; want at most 2, not growing",
			short, len(afterShort), afterShort, long, len(afterLong), afterLong)
	}
	if len(ids) != 1 {
		t.Fatalf("b's claims had %d distinct IDs, want 1: %v", len(ids), ids)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d after %d under a reused name: not strictly increasing", tokens[i], tokens[i-1])
		}
	}
}

// Acquisitions of one key that are in etcd at the same time, from one
// Backend, never share a name, also once names are being reused: each has
// a claim of its own, and each gets the key in turn under its own name.
func TestNamesNotSharedByConcurrentAcquisitions(t *testing.T) {
	const waiters = 6 // more than a key keeps free, so names are both reused and made
	prefix := uniquePrefix(t)
	b, cli := newBackend(t, shared, prefix)
	hb, _ := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	lh := grant(t, hb, 30*time.Second)
	dir := prefix + "claims/k/"

	seen := map[string]bool{}
	for round := range 3 {
		holder := acquire(t, hb, request("k", lh, "H"))
		ctx := testCtx(t, waitBound)
		got := make(chan result, waiters)
		for range waiters {
			r := request("k", l, "W")
			go func() {
				c, err := b.Acquire(ctx, r)
				got <- result{c, err}
			}()
		}
		// Every waiter has borrowed its name and created its claim.
		awaitCount(t, cli, dir, waiters+1)
		ks := keys(t, cli, dir)
		names := map[string]bool{}
		for _, k := range ks {
			names[strings.TrimPrefix(k, dir)] = true
		}
		if len(names) != waiters+1 {
			t.Fatalf("round %d: %d distinct names for %d claims: %q", round, len(names), waiters+1, ks)
		}
		if err := hb.Release(ctx, holder); err != nil {
			t.Fatal(err)
		}
		held := map[string]bool{}
		for range waiters {
			var r result
			select {
			case r = <-got:
			case <-time.After(waitBound):
				t.Fatalf("round %d: a waiter did not get the key within %v", round, waitBound)
			}
			if r.err != nil {
				t.Fatalf("round %d: waiter: %v", round, r.err)
			}
			held[r.claim.ID] = true
			seen[r.claim.ID] = true
			if err := b.Release(ctx, r.claim); err != nil {
				t.Fatal(err)
			}
		}
		if len(held) != waiters {
			t.Fatalf("round %d: %d waiters held the key under %d names", round, waiters, len(held))
		}
	}
	if len(seen) == 3*waiters {
		t.Fatalf("%d names for %d acquisitions: none was reused", len(seen), 3*waiters)
	}
}

// A name whose claim could not be removed is not used again while its
// removal is being retried, and is used again once the removal succeeded.
func TestNameNotReusedWhileCleanupFails(t *testing.T) {
	prefix := uniquePrefix(t)
	var fail deleteFailer
	b, _ := newBackend(t, shared, prefix, func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(fail.intercept))
	})
	hb, operator := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	holder := acquire(t, hb, request("k", grant(t, hb, 30*time.Second), "H"))
	dir := prefix + "claims/k/"
	holderName := strings.TrimPrefix(hb.ClaimKey(holder), dir)

	// W1 waits and is cancelled while every delete fails: its claim stays.
	ctx1, cancel1 := context.WithCancel(context.Background())
	w1 := start(ctx1, b, request("k", l, "W1"))
	awaitCount(t, operator, dir, 2)
	w1Name := otherName(t, operator, dir, holderName)
	fail.armed.Store(true)
	cancel1()
	if res := await(t, w1, "W1"); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("W1: %v, want context.Canceled", res.err)
	}
	if fail.refused.Load() == 0 {
		t.Fatal("W1's cleanup sent no delete")
	}
	if !slices.Contains(keys(t, operator, dir), dir+w1Name) {
		t.Fatal("W1's claim is gone although every delete failed")
	}

	// While the removal keeps failing, new waiters get other names.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	w2 := start(ctx2, b, request("k", l, "W2"))
	// Under W1's name, W2 would have found W1's claim and taken it as its
	// own: the count would stay at 2.
	awaitCount(t, operator, dir, 3)

	// Once deletes go through, the background retry removes W1's claim
	// and its name is free again.
	fail.armed.Store(false)
	awaitCount(t, operator, dir, 2)
	if slices.Contains(keys(t, operator, dir), dir+w1Name) {
		t.Fatal("the claim removed is not W1's")
	}
	cancel2()
	if res := await(t, w2, "W2"); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("W2: %v, want context.Canceled", res.err)
	}
	// The background retry frees the name right after its delete
	// succeeds, which the awaitCount above may have seen first; so look
	// for the name over a few rounds of waiters that take the lowest free
	// names.
	deadline := time.Now().Add(waitBound)
	for {
		if lent := takeAllFree(t, b, operator, l, dir, holderName); slices.Contains(lent, w1Name) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("W1's name %s not used again within %v of its removal", w1Name, waitBound)
		}
	}
}

// A claim found under the name an Acquire uses - a write applied by etcd
// after its sender had given up on it and removed the claim - is taken over
// if it is bound to the Acquire's lease (it is as good as the claim the
// Acquire was about to write), and removed if it is bound to another lease
// (only a hand-made key can be), failing that one Acquire; either way the
// key is not left blocked.
func TestClaimFoundUnderItsName(t *testing.T) {
	tests := []struct {
		name      string
		sameLease bool
	}{
		{"SameLeaseIsAdopted", true},
		{"OtherLeaseIsRemoved", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			b, operator := newBackend(t, shared, prefix)
			l := grant(t, b, 30*time.Second)
			first := acquire(t, b, request("k", l, "first"))
			if err := b.Release(testCtx(t, waitBound), first); err != nil {
				t.Fatal(err)
			}
			// first's name is free again, and the next Acquire uses it.
			lease := l.ID
			if !tt.sameLease {
				lease = grant(t, b, 30*time.Second).ID
			}
			put, err := operator.Put(testCtx(t, waitBound), b.ClaimKey(first), "", clientv3.WithLease(clientv3.LeaseID(lease)))
			if err != nil {
				t.Fatal(err)
			}
			c, err := b.Acquire(testCtx(t, waitBound), request("k", l, "next"))
			if tt.sameLease {
				if err != nil {
					t.Fatalf("Acquire over a claim of its own lease: %v", err)
				}
				if c.ID != first.ID || c.Token != uint64(put.Header.Revision) {
					t.Fatalf("Acquire = ID %s token %d; want the claim found, %s at %d",
						c.ID, c.Token, first.ID, put.Header.Revision)
				}
				if err := b.Release(testCtx(t, waitBound), c); err != nil {
					t.Fatal(err)
				}
			} else if !errors.Is(err, backend.ErrUnavailable) {
				t.Fatalf("Acquire over a stray claim of another lease: token %d, %v; want ErrUnavailable", c.Token, err)
			}
			if left := keys(t, operator, prefix+"claims/"); len(left) != 0 {
				t.Fatalf("claims left: %q", left)
			}
			again := acquire(t, b, request("k", l, "again"))
			if again.Token <= uint64(put.Header.Revision) {
				t.Fatalf("token %d after the found claim's %d", again.Token, put.Header.Revision)
			}
		})
	}
}

// takeAllFree queues four fair waiters on b, behind a holder of another
// Backend, so that they take the four lowest free names of their lease; it
// returns their names and cancels them.
func takeAllFree(t *testing.T, b *etcd.Backend, operator *clientv3.Client, l backend.Lease, dir, holderName string) []string {
	t.Helper()
	const n = 4
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var res []<-chan result
	for range n {
		res = append(res, start(ctx, b, request("k", l, "drain")))
	}
	awaitCount(t, operator, dir, n+1)
	var names []string
	for _, k := range keys(t, operator, dir) {
		if name := strings.TrimPrefix(k, dir); name != holderName {
			names = append(names, name)
		}
	}
	cancel()
	for _, ch := range res {
		if r := await(t, ch, "drain"); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("drain waiter: %v, want context.Canceled", r.err)
		}
	}
	awaitCount(t, operator, dir, 1)
	return names
}

// otherName returns the one claim name under dir that is not skip.
func otherName(t *testing.T, cli *clientv3.Client, dir, skip string) string {
	t.Helper()
	for _, k := range keys(t, cli, dir) {
		if name := strings.TrimPrefix(k, dir); name != skip {
			return name
		}
	}
	t.Fatalf("no claim under %q other than %s", dir, skip)
	return ""
}

// deleteFailer makes every request that may delete a key fail at the
// client, without reaching etcd, while armed.
type deleteFailer struct {
	armed   atomic.Bool
	refused atomic.Int64
}

func (d *deleteFailer) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if d.armed.Load() && deletes(req) {
		d.refused.Add(1)
		return status.Error(codes.Unavailable, "test: delete refused")
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func deletes(req any) bool {
	switch r := req.(type) {
	case *pb.DeleteRangeRequest:
		return true
	case *pb.TxnRequest:
		for _, op := range append(r.Success, r.Failure...) {
			if op.GetRequestDeleteRange() != nil || (op.GetRequestTxn() != nil && deletes(op.GetRequestTxn())) {
				return true
			}
		}
	}
	return false
}

// nameLog records every key put under a prefix from its creation on, by
// watching from the revision at which it was made.
type nameLog struct {
	cli    *clientv3.Client
	prefix string
	wch    clientv3.WatchChan
	puts   map[string]bool
}

func newNameLog(t *testing.T, cli *clientv3.Client, prefix string) *nameLog {
	t.Helper()
	resp, err := cli.Get(testCtx(t, waitBound), prefix+"sentinel")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &nameLog{
		cli:    cli,
		prefix: prefix,
		wch:    cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)),
		puts:   map[string]bool{},
	}
}

// created returns the distinct names put under dir so far, sorted. It
// writes a sentinel key under the log's prefix (outside every claim
// directory) and reads the watch up to it, so nothing written before the
// call is missed.
func (n *nameLog) created(t *testing.T, dir string) []string {
	t.Helper()
	put, err := n.cli.Put(testCtx(t, waitBound), n.prefix+"sentinel", "")
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(waitBound)
	for reached := false; !reached; {
		select {
		case wr, ok := <-n.wch:
			if !ok || wr.Err() != nil {
				t.Fatalf("name log watch ended: %v", wr.Err())
			}
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision >= put.Header.Revision {
					reached = true
				}
				if ev.Type == mvccpb.PUT && strings.HasPrefix(string(ev.Kv.Key), n.prefix+"claims/") {
					n.puts[string(ev.Kv.Key)] = true
				}
			}
		case <-timeout:
			t.Fatalf("the name log watch did not reach revision %d within %v", put.Header.Revision, waitBound)
		}
	}
	var out []string
	for k := range n.puts {
		if name, ok := strings.CutPrefix(k, dir); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Every claim held past the claim watch delay gets a watch of its own, and
// a TryAcquire that finds the key held creates no claim and so no watch.
// After many cycles the last claim still learns of its loss promptly, also
// when the loss comes before its watch starts: an operator's delete right
// after the Acquire, or its lease's revoke.
func TestEveryClaimWatched(t *testing.T) {
	for _, loss := range []string{"OperatorDelete", "LeaseRevoked"} {
		t.Run(loss, func(t *testing.T) {
			prefix := uniquePrefix(t)
			var wc watchCounter
			b, cli := newBackendWith(t, shared, prefix, nil, wc.configure)
			l := grant(t, b, 30*time.Second)
			const cycles = 5
			for i := range cycles {
				c := acquire(t, b, request("k", l, "cycle"))
				require.Eventually(t, func() bool { return wc.single.Load() == int64(i+1) }, waitBound, time.Millisecond,
					"cycle %d: the claim's watch", i)
				tryHeldThenRelease(t, b, l, c, i)
			}
			require.EqualValues(t, cycles, wc.single.Load(), "watches created: one per claim, none per TryAcquire")

			lost := newLostSignal()
			r := request("k", l, "last")
			r.OnLost = backend.LossFunc(lost.onLost)
			c := acquire(t, b, r)
			at := time.Now()
			switch loss {
			case "OperatorDelete":
				resp, err := cli.Delete(testCtx(t, waitBound), b.ClaimKey(c))
				require.NoError(t, err)
				require.EqualValues(t, 1, resp.Deleted)
			case "LeaseRevoked":
				require.NoError(t, b.Revoke(testCtx(t, waitBound), l.ID))
			}
			took := lost.await(t, lossBound, at)
			t.Logf("OnLost %v after the loss", took)
			assert.ErrorIs(t, lost.cause, backend.ErrLeaseExpired)
		})
	}
}

// tryHeldThenRelease checks that a TryAcquire of c's key, held by c, fails
// with ErrLocked, then releases c; i numbers the cycle in messages.
func tryHeldThenRelease(t *testing.T, b *etcd.Backend, l backend.Lease, c backend.Claim, i int) {
	t.Helper()
	try := request(c.Key, l, "try")
	try.Wait = false
	if _, err := b.Acquire(testCtx(t, waitBound), try); !errors.Is(err, backend.ErrLocked) {
		t.Fatalf("cycle %d: TryAcquire of a held key: %v, want ErrLocked", i, err)
	}
	if err := b.Release(testCtx(t, waitBound), c); err != nil {
		t.Fatal(err)
	}
}

// A Release that names a held claim without its token (token 0, which no
// claim has) removes nothing: neither the claim under that name nor
// anything else, even though the held claim's own release goes by name.
func TestReleaseWithoutTokenRemovesNothing(t *testing.T) {
	prefix := uniquePrefix(t)
	b, operator := newBackend(t, shared, prefix)
	held := acquire(t, b, request("k", grant(t, b, 30*time.Second), "H"))
	forged := held
	forged.Token = 0
	require.NoError(t, b.Release(testCtx(t, waitBound), forged))
	require.Equal(t, []string{b.ClaimKey(held)}, keys(t, operator, prefix+"claims/"), "claims after a Release with token 0")
	require.NoError(t, b.Release(testCtx(t, waitBound), held))
	require.Empty(t, keys(t, operator, prefix+"claims/"), "claims after the holder's own Release")
}
