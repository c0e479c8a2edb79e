package ashlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

func TestMutualExclusionAcrossClientsAndFairness(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	clients := []*ashlock.LockClient{
		newClient(t, ashlock.LockConfig{}, b),
		newClient(t, ashlock.LockConfig{}, b),
		newClient(t, ashlock.LockConfig{}, b),
	}
	ctx := testCtx(t)
	var inside, violations atomic.Int32
	var lastToken atomic.Uint64
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() {
			c := clients[i%len(clients)]
			for range 20 {
				err := c.Lock("shared").WithFairness(i%2 == 0).Do(ctx, func(ctx context.Context, token uint64) error {
					if inside.Add(1) != 1 {
						violations.Add(1)
					}
					if prev := lastToken.Swap(token); token <= prev {
						t.Errorf("token %d after %d: not strictly increasing", token, prev)
					}
					runtime.Gosched()
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
		t.Fatalf("%d times more than one holder was inside", n)
	}
}

func TestKeysThatArePrefixesDoNotShareAQueue(t *testing.T) {
	c := newClient(t, ashlock.LockConfig{}, nil)
	ctx := testCtx(t)
	keys := []string{"a", "a/b", "a/", "orders/4", "orders/42"}
	for _, k := range keys {
		g, err := c.Lock(k).TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire(%q) with the others held: %v", k, err)
		}
		t.Cleanup(func() { _ = g.Unlock(context.Background()) })
	}
}

func TestFairWaitersAreServedInRequestOrder(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	holder := newClient(t, ashlock.LockConfig{}, b)
	ctx := testCtx(t)
	g, err := holder.Lock("k").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		c := newClient(t, ashlock.LockConfig{}, b)
		wg.Go(func() {
			err := c.Lock("k").WithOwner(fmt.Sprint(i)).Do(ctx, func(context.Context, uint64) error {
				order <- i
				return nil
			})
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
		})
		// Wait until waiter i is queued before starting i+1, so request
		// order is known.
		waitForWaiters(t, holder, "k", i+1)
	}
	if err := g.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d served in place %d", got, want)
		}
		want++
	}
}

// waitForWaiters blocks until Inspect shows n waiters on key.
func waitForWaiters(t *testing.T, c *ashlock.LockClient, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		info, err := c.Inspect(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Waiters) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect(%q) shows %d waiters after %v, want %d", key, len(info.Waiters), testTimeout, n)
		}
		runtime.Gosched()
	}
}

func TestTryAcquireOnHeldKey(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	c1 := newClient(t, ashlock.LockConfig{}, b)
	c2 := newClient(t, ashlock.LockConfig{}, b)
	ctx := testCtx(t)
	g, err := c1.Lock("k").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Lock("k").TryAcquire(ctx); !errors.Is(err, ashlock.ErrLocked) {
		t.Fatalf("TryAcquire on held key = %v, want ErrLocked", err)
	}
	info, err := c1.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := g.FencingToken()
	if !info.Held || info.Token != tok || len(info.Waiters) != 0 {
		t.Errorf("Inspect = %+v; want held with token %d and no waiter left behind", info, tok)
	}
}

func TestCancelledWaitReturnsContextErrorAndLeavesNothing(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	c := newClient(t, ashlock.LockConfig{}, b)
	ctx := testCtx(t)
	g, err := c.Lock("k").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = c.Lock("k").Acquire(wctx)
	if !errors.Is(err, wctx.Err()) || errors.Is(err, ashlock.ErrLocked) {
		t.Fatalf("timed-out Acquire = %v; want errors.Is(err, %v) and not ErrLocked", err, wctx.Err())
	}
	info, err := c.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Waiters) != 0 {
		t.Errorf("cancelled waiter left in queue: %+v", info.Waiters)
	}
	_ = g.Unlock(ctx)
}

func TestInspectReportsHolderAndWaiters(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	c := newClient(t, ashlock.LockConfig{}, b)
	ctx := testCtx(t)
	if info, err := c.Inspect(ctx, "k"); err != nil || info.Held {
		t.Fatalf("Inspect of free key = %+v, %v; want Held false, nil", info, err)
	}
	before := time.Now()
	g, err := c.Lock("k").WithOwner("job-1").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiter := newClient(t, ashlock.LockConfig{}, b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = waiter.Lock("k").WithOwner("job-2").Do(ctx, func(context.Context, uint64) error { return nil })
	}()
	waitForWaiters(t, c, "k", 1)
	info, err := c.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := g.FencingToken()
	if info.Key != "k" || !info.Held || info.Owner != "job-1" || info.Token != tok || info.AcquiredAt.Before(before.Add(-time.Second)) {
		t.Errorf("Inspect = %+v; want k held by job-1 with token %d", info, tok)
	}
	if len(info.Waiters) != 1 || info.Waiters[0].Owner != "job-2" || info.Waiters[0].Token <= tok {
		t.Errorf("Waiters = %+v; want [job-2 with a token above %d]", info.Waiters, tok)
	}
	_ = g.Unlock(ctx)
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("waiter never got the key")
	}
}

func TestStampsIncreaseAcrossHoldersAndClients(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	cfg := ashlock.LockConfig{Stamps: true}
	clients := []*ashlock.LockClient{newClient(t, cfg, b), newClient(t, cfg, b)}
	ctx := testCtx(t)
	var prev ashlock.Timestamp
	for i := range 20 {
		g, err := clients[i%2].Lock("k").Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s, ok := g.Stamp()
		if !ok {
			t.Fatal("Stamp() ok = false with Stamps on")
		}
		if !prev.Less(s) {
			t.Fatalf("holder %d stamp %v not above previous holder's %v", i, s, prev)
		}
		prev = s
		_ = g.Unlock(ctx)
	}
	off := newClient(t, ashlock.LockConfig{}, b)
	g, err := off.Lock("k").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := g.Stamp(); ok {
		t.Error("Stamp() ok = true with Stamps off")
	}
}

func TestCloseReleasesHeldGuardsForOthers(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	ctx := testCtx(t)
	c1, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{}, b)
	if err != nil {
		t.Fatal(err)
	}
	var guards []*ashlock.Guard
	for i := range 10 {
		g, err := c1.Lock(fmt.Sprint("k", i)).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		guards = append(guards, g)
	}
	if err := c1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c2 := newClient(t, ashlock.LockConfig{}, b)
	for i, g := range guards {
		waitDone(t, g)
		if _, err := c2.Lock(fmt.Sprint("k", i)).TryAcquire(ctx); err != nil {
			t.Errorf("key %d still held after Close: %v", i, err)
		}
	}
}

func TestCloseEndsWaitingAcquire(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	ctx := testCtx(t)
	holder := newClient(t, ashlock.LockConfig{}, b)
	held, err := holder.Lock("k").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.KeepAlive(held) // a dropped Guard would free the key
	c, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{}, b)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := c.Lock("k").Acquire(ctx); errc <- err }()
	waitForWaiters(t, holder, "k", 1)
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ashlock.ErrClosed) {
			t.Errorf("waiting Acquire after Close = %v, want ErrClosed", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("waiting Acquire did not end on Close")
	}
}

func TestUnlockNeverRemovesALaterHolder(t *testing.T) {
	{
		b := memory.New()
		t.Cleanup(func() { _ = b.Close() })
		c := newClient(t, ashlock.LockConfig{}, b)
		ctx := testCtx(t)
		g1, err := c.Lock("k").Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.DeleteClaim("k") // as if an operator removed it
		waitDone(t, g1)
		g2, err := c.Lock("k").Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The first guard's late unlock must not touch the second's claim.
		if err := g1.Unlock(ctx); !errors.Is(err, ashlock.ErrLeaseExpired) {
			t.Errorf("Unlock of poisoned guard = %v, want ErrLeaseExpired", err)
		}
		if err := g2.Err(); err != nil {
			t.Fatalf("later holder ended by earlier Unlock: %v", err)
		}
		info, _ := c.Inspect(ctx, "k")
		tok, _ := g2.FencingToken()
		if !info.Held || info.Token != tok {
			t.Errorf("Inspect = %+v; want held by token %d", info, tok)
		}
	}
}

func TestManyGuardsCostNoGoroutineEach(t *testing.T) {
	c := newClient(t, ashlock.LockConfig{}, nil)
	ctx := testCtx(t)
	if _, err := c.Lock("warm").Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	held := make([]*ashlock.Guard, 0, 10_000) // kept: a dropped Guard is released
	for i := range 10_000 {
		g, err := c.Lock(fmt.Sprint("key/", i)).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, g)
	}
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Errorf("goroutines grew from %d to %d holding 10,000 guards", before, after)
	}
	runtime.KeepAlive(held)
}

// idRecorder passes every call to a memory backend and records the
// AcquireRequest.ID of each Acquire. It embeds the backend.Backend
// interface, so it is not a backend.ClaimNamer unless wrapped in namer.
type idRecorder struct {
	backend.Backend
	mu  sync.Mutex
	ids []string
}

func (r *idRecorder) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Claim, error) {
	r.mu.Lock()
	r.ids = append(r.ids, req.ID)
	r.mu.Unlock()
	return r.Backend.Acquire(ctx, req)
}

// namer is an idRecorder that says it names its claims itself.
type namer struct{ *idRecorder }

func (namer) NamesClaims() {}

// The client names each acquisition with a fresh UUID for a backend that
// needs one, and leaves the name to a backend.ClaimNamer.
func TestClaimIDsOnlyForBackendsThatNeedThem(t *testing.T) {
	tests := []struct {
		name  string
		wrap  func(*idRecorder) backend.Backend
		named bool
	}{
		{"PlainBackend", func(r *idRecorder) backend.Backend { return r }, false},
		{"ClaimNamer", func(r *idRecorder) backend.Backend { return namer{r} }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := memory.New()
			t.Cleanup(func() { _ = b.Close() })
			rec := &idRecorder{Backend: b}
			ctx := testCtx(t)
			c, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{Logger: quiet}, tt.wrap(rec))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close(context.Background()) })
			for range 3 {
				g, err := c.Lock("k").Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if cl, err := g.Claim(); err != nil || cl.ID == "" {
					t.Errorf("Claim() = %+v, %v; want a named claim", cl, err)
				}
				if err := g.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			seen := map[string]bool{}
			for _, id := range rec.ids {
				if tt.named {
					if id != "" {
						t.Errorf("request ID %q sent to a ClaimNamer, want none", id)
					}
					continue
				}
				if _, err := uuid.Parse(id); err != nil || seen[id] {
					t.Errorf("request ID %q: parse error %v, repeated %v; want a fresh UUID", id, err, seen[id])
				}
				seen[id] = true
			}
		})
	}
}

// hangingRevoke stands for a remote store that never answers a Revoke: the
// call returns only when its context ends. Everything else goes to a
// memory backend.
type hangingRevoke struct {
	backend.Backend
	revokes atomic.Int32
}

func (h *hangingRevoke) Revoke(ctx context.Context, _ backend.LeaseID) error {
	h.revokes.Add(1)
	<-ctx.Done()
	return errors.Join(backend.ErrUnavailable, ctx.Err())
}

// closeAfterAcquire holds a lock on a client of a store that never answers
// a revoke, closes the client with ctx, and returns Close's error and how
// long it took by the bubble's clock.
func closeAfterAcquire(t *testing.T, ctx context.Context) (*hangingRevoke, time.Duration, error) {
	h := &hangingRevoke{Backend: bubbleBackend(t)}
	c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{DefaultTTL: wdTTL, Logger: quiet}, h)
	require.NoError(t, err)
	g, err := c.Lock("k").Acquire(t.Context())
	require.NoError(t, err)
	start := time.Now()
	err = c.Close(ctx)
	took := time.Since(start)
	assert.ErrorIs(t, g.Err(), ashlock.ErrUnlocked, "Close ends every guard")
	return h, took, err
}

func TestCloseReturnsWhenItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		h, took, err := closeAfterAcquire(t, ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, int32(1), h.revokes.Load(), "Close tries to revoke the lease")
		assert.Equal(t, 100*time.Millisecond, took, "Close outlasted its context")
	})
}

func TestCloseOnEndedContextStillTriesToRevoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		h, took, err := closeAfterAcquire(t, ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, ashlock.ErrUnavailable, "the revoke that got no answer is reported")
		assert.Equal(t, int32(1), h.revokes.Load(), "a Close after its context ended still revokes")
		assert.Positive(t, took, "the revoke had a bounded time of its own")
		assert.Less(t, took, time.Minute)
	})
}
