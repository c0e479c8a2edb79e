package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// keysUnder counts the etcd keys under prefix.
func keysUnder(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(testCtx(t), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

func TestMutualExclusionAndTokensAcrossClients(t *testing.T) {
	prefix := uniquePrefix(t)
	clients := make([]*ashlock.LockClient, 4)
	for i := range clients {
		clients[i] = connect(t, shared, prefix, ashlock.LockConfig{DefaultTTL: 5 * time.Second})
	}
	ctx := testCtx(t)
	var inside, violations atomic.Int32
	var mu sync.Mutex
	var last uint64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			c := clients[i%len(clients)]
			for range 10 {
				err := c.Lock("shared").WithFairness(i%3 != 0).Do(ctx, func(ctx context.Context, token uint64) error {
					if inside.Add(1) != 1 {
						violations.Add(1)
					}
					mu.Lock()
					if token <= last {
						t.Errorf("token %d after %d: not strictly increasing", token, last)
					}
					last = token
					mu.Unlock()
					inside.Add(-1)
					return nil
				})
				if err != nil {
					t.Errorf("Do: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := violations.Load(); n != 0 {
		t.Fatalf("%d times two holders were inside at once", n)
	}
}

func TestCloseLeavesNothingUnderThePrefix(t *testing.T) {
	prefix := uniquePrefix(t)
	cli := shared.Client(t, nil)
	holder := connect(t, shared, prefix, ashlock.LockConfig{})
	ctx := testCtx(t)

	c, err := ashlock.Connect(ctx, ashlock.LockConfig{ClusterSeed: seed(shared, prefix), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var guards []*ashlock.Guard // kept: Close, not the GC, is to release them
	for i := range 20 {
		g, err := c.Lock(fmt.Sprint("k", i)).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		guards = append(guards, g)
	}
	defer runtime.KeepAlive(guards)
	// A wait on a held key, cancelled by its context...
	held, err := holder.Lock("busy").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.Lock("busy").Acquire(wctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled wait = %v, want DeadlineExceeded", err)
	}
	// ...and one still waiting when the client closes.
	errc := make(chan error, 1)
	go func() { _, err := c.Lock("busy").Acquire(ctx); errc <- err }()
	waitWaiters(t, holder, prefix, "busy", 1)

	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ashlock.ErrClosed) {
			t.Errorf("wait across Close = %v, want ErrClosed", err)
		}
	case <-time.After(waitBound):
		t.Fatal("waiting Acquire did not end on Close")
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := keysUnder(t, cli, prefix); n != 0 {
		t.Errorf("%d keys left under %q after Close and Unlock, want 0", n, prefix)
	}
}

// waitWaiters blocks until Inspect shows n waiters on key of c, whose
// prefix in the shared etcd is prefix. It reads again after each change
// under prefix, which it watches rather than polls, for up to waitBound.
func waitWaiters(t *testing.T, c *ashlock.LockClient, prefix, key string, n int) {
	t.Helper()
	cli := shared.Client(t, nil)
	ctx := testCtx(t)
	for {
		// Inspect reads at this revision or later; the watch replays
		// every change after it.
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		require.NoError(t, err)
		info, err := c.Inspect(ctx, key)
		require.NoError(t, err)
		if len(info.Waiters) == n {
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		select {
		case <-cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)):
		case <-ctx.Done():
			cancel()
			t.Fatalf("%d waiters on %q after %v, want %d", len(info.Waiters), key, waitBound, n)
		}
		cancel()
	}
}

func TestOperatorRevokePoisonsPromptly(t *testing.T) {
	prefix := uniquePrefix(t)
	cli := shared.Client(t, nil)
	// A 30s TTL renews every 10s: only the loss watch can poison quickly.
	c := connect(t, shared, prefix, ashlock.LockConfig{DefaultTTL: 30 * time.Second})
	ctx := testCtx(t)
	other, err := c.Lock("other").WithTTL(20 * time.Second).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var worst time.Duration
	for i := range 5 {
		g, err := c.Lock(fmt.Sprint("k", i)).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		claim, err := g.Claim()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := cli.Revoke(ctx, clientv3.LeaseID(claim.Lease)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.Done():
			worst = max(worst, time.Since(start))
		case <-time.After(2 * time.Second):
			t.Fatalf("revoked guard still valid after 2s (renewal interval is 10s)")
		}
		if !errors.Is(g.Err(), ashlock.ErrLeaseExpired) {
			t.Errorf("Err = %v, want ErrLeaseExpired", g.Err())
		}
	}
	t.Logf("worst revoke-to-Done over 5 trials: %v", worst)
	if err := other.Err(); err != nil {
		t.Errorf("guard on another lease: Err = %v, want nil", err)
	}
}

func TestOperatorDeletePoisonsOnlyThatGuard(t *testing.T) {
	prefix := uniquePrefix(t)
	cli := shared.Client(t, nil)
	c := connect(t, shared, prefix, ashlock.LockConfig{DefaultTTL: 30 * time.Second})
	ctx := testCtx(t)
	a, err := c.Lock("a").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Lock("b").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Find a's claim by listing the prefix: an operator would do the same.
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	tokA, _ := a.FencingToken()
	deleted := false
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == int64(tokA) {
			if _, err := cli.Delete(ctx, string(kv.Key)); err != nil {
				t.Fatal(err)
			}
			deleted = true
		}
	}
	if !deleted {
		t.Fatalf("no key under %q with create revision %d", prefix, tokA)
	}
	select {
	case <-a.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("guard whose claim was deleted still valid after 2s")
	}
	if err := b.Err(); err != nil {
		t.Errorf("guard on the same lease, other key: Err = %v, want nil", err)
	}
	// The key is free again at once for someone else.
	g, err := c.Lock("a").TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after operator delete: %v", err)
	}
	_ = g.Unlock(ctx)
}

func TestLeasesArePooledPerTTL(t *testing.T) {
	cluster := etcdtest.Start(t) // a server of its own, to count every lease
	cli := cluster.Client(t, nil)
	c := connect(t, cluster, uniquePrefix(t), ashlock.LockConfig{DefaultTTL: 10 * time.Second})
	ctx := testCtx(t)
	// Every guard is kept until the end: one dropped would be released.
	var guards []*ashlock.Guard
	defer runtime.KeepAlive(&guards)
	acquire := func(b *ashlock.LockBuilder) {
		g, err := b.Acquire(ctx)
		require.NoError(t, err)
		guards = append(guards, g)
	}
	// Warm up: the first guard of each TTL starts the lease's keep-alive
	// and the backend's loss watch.
	acquire(c.Lock("k-warm"))
	acquire(c.Lock("other-ttl").WithTTL(20 * time.Second))
	before := runtime.NumGoroutine()
	for i := range 300 {
		acquire(c.Lock(fmt.Sprint("k", i)))
	}
	leases, err := cli.Leases(ctx)
	require.NoError(t, err)
	assert.Len(t, leases.Leases, 2, "leases for 301 guards of one TTL and 1 of another")
	// Not a goroutine per guard: a handful may come and go with renewals
	// and gRPC streams in flight.
	after := runtime.NumGoroutine()
	assert.Less(t, after-before, 30, "goroutines grew from %d to %d for 300 more guards", before, after)
}

func TestTTLIsRoundedUpAndGrantedTTLDrivesTheDeadline(t *testing.T) {
	c := connect(t, shared, uniquePrefix(t), ashlock.LockConfig{})
	ctx := testCtx(t)
	start := time.Now()
	// 500ms rounds up to 1s and etcd raises it to its minimum (about 2s
	// with default timing); the guard must live by what was granted.
	g, err := c.Lock("k").WithTTL(500 * time.Millisecond).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := g.Deadline().Sub(start); d <= time.Second {
		t.Errorf("deadline %v after acquire: the requested 500ms, not the granted TTL, drives it", d)
	}
	// And the watchdog keeps it alive past several requested TTLs.
	select {
	case <-g.Done():
		t.Fatalf("guard ended: %v", g.Err())
	case <-time.After(3 * time.Second):
	}
}

func TestStampsIncreaseAcrossClientsOnEtcd(t *testing.T) {
	prefix := uniquePrefix(t)
	cfg := ashlock.LockConfig{Stamps: true}
	cs := []*ashlock.LockClient{connect(t, shared, prefix, cfg), connect(t, shared, prefix, cfg)}
	ctx := testCtx(t)
	var prev ashlock.Timestamp
	for i := range 10 {
		g, err := cs[i%2].Lock("k").Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s, ok := g.Stamp()
		if !ok || !prev.Less(s) {
			t.Fatalf("holder %d: stamp %v (ok %v) not above previous %v", i, s, ok, prev)
		}
		prev = s
		if err := g.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestUnreachableEndpointFailsWithinDeadline(t *testing.T) {
	// A port nothing listens on: bind one, note it, close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	c, err := ashlock.Connect(ctx, ashlock.LockConfig{ClusterSeed: "etcd://" + addr + "/x/"})
	if c != nil || !errors.Is(err, ashlock.ErrUnavailable) {
		t.Fatalf("Connect to %s = %v, %v; want nil, ErrUnavailable", addr, c, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v; want it joined with the context's error", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Connect returned %v after a 1s deadline", took)
	}
}
