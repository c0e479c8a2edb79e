package redisbackend

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// holders names the holders of a state: owner, token and value of each.
func holders(info backend.LockInfo) string {
	var parts []string
	for _, h := range info.Holders {
		parts = append(parts, fmt.Sprintf("%s#%d=%s", h.Owner, h.Token, h.Value))
	}
	return strings.Join(parts, ",")
}

// heldBy names the state where only c, labelled owner, holds, with value v.
func heldBy(owner string, c backend.Claim, v string) string {
	return fmt.Sprintf("%s#%d=%s", owner, c.Token, v)
}

// observe runs b.Observe(key) on a goroutine of its own, handing each
// state over unbuffered: while the test does not take them, the Observe
// waits in its yield.
func observe(t *testing.T, ctx context.Context, b backend.Observer, key string) <-chan backend.LockInfo {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	states := make(chan backend.LockInfo)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for info, err := range b.Observe(ctx, key) {
			if err != nil {
				return
			}
			select {
			case states <- info:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Observe did not end within 10s of its context")
		}
	})
	return states
}

// next takes the next state.
func next(t *testing.T, states <-chan backend.LockInfo) backend.LockInfo {
	t.Helper()
	select {
	case info := <-states:
		return info
	case <-time.After(10 * time.Second):
		t.Fatal("no state observed within 10s")
		return backend.LockInfo{}
	}
}

// observedUntil takes states until one held by owner last, and returns
// their holders.
func observedUntil(t *testing.T, states <-chan backend.LockInfo, last string) []string {
	t.Helper()
	var got []string
	for {
		select {
		case info := <-states:
			got = append(got, holders(info))
			if info.Owner == last {
				return got
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no state held by %q within 10s; observed %q", last, got)
			return nil
		}
	}
}

// Every change of the holders is observed, in order, however fast the
// changes come and however slow the consumer: handoff chains through
// waiters queued behind a holder, values set, and quick successive terms
// of an election, all made while the consumer takes nothing.
func TestObserveReportsEveryChange(t *testing.T) {
	ctx := ctxFor(t)
	ob, _, prefix := newBackend(t)
	mb, _, _ := newBackendPrefix(t, prefix)
	l := grant(t, mb, time.Minute)
	states := observe(t, ctx, ob, "every")
	require.False(t, next(t, states).Held)
	var want []string

	acquire := func(owner string) backend.Claim {
		c, err := mb.Acquire(ctx, request("every", l, owner))
		require.NoError(t, err)
		return c
	}
	release := func(c backend.Claim) { require.NoError(t, mb.Release(ctx, c)) }
	for r := range 3 {
		// A handoff chain: each release hands the key to the next waiter.
		owner := fmt.Sprintf("A%d", r)
		h := acquire(owner)
		want = append(want, heldBy(owner, h, ""))
		require.NoError(t, mb.SetValue(ctx, h, []byte("v")))
		want = append(want, heldBy(owner, h, "v"))
		var chain []*pending
		var names []string
		for i := range 3 {
			names = append(names, fmt.Sprintf("W%d.%d", r, i))
			chain = append(chain, startAcquire(t, mb, request("every", l, names[i])))
			awaitWaiting(t, mb, "every", i+1)
		}
		for i, w := range chain {
			release(h)
			h = w.await(t)
			want = append(want, heldBy(names[i], h, ""))
		}
		release(h)
		want = append(want, "")
		// Quick terms: each leader resigns as soon as it is elected.
		for i := range 5 {
			owner := fmt.Sprintf("T%d.%d", r, i)
			c := acquire(owner)
			want = append(want, heldBy(owner, c, ""))
			release(c)
			want = append(want, "")
		}
	}
	end := acquire("end")
	want = append(want, heldBy("end", end, ""))
	assert.Equal(t, want, observedUntil(t, states, "end"))
}

// Terms that begin and end while the observer's subscriber connection is
// silent (its bytes held, as on a network dropping packets for a while)
// are all observed once the bytes flow again, late but in order: Redis
// delivers the held messages, and the observer applies each.
func TestObserveHeldConnectionYieldsEveryTerm(t *testing.T) {
	ctx := ctxFor(t)
	prefix := redistest.Prefix()
	p, err := srv.Proxy()
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	ob := backendVia(ctx, t, p.Addr(), prefix)
	mb, _, _ := newBackendPrefix(t, prefix)
	l := grant(t, mb, time.Minute)
	states := observe(t, ctx, ob, "held")
	require.False(t, next(t, states).Held)
	var want []string

	p.Blackhole()
	for i := range 6 {
		owner := fmt.Sprintf("T%d", i)
		c, err := mb.Acquire(ctx, request("held", l, owner))
		require.NoError(t, err)
		want = append(want, heldBy(owner, c, ""))
		require.NoError(t, mb.Release(ctx, c))
		want = append(want, "")
	}
	end, err := mb.Acquire(ctx, request("held", l, "end"))
	require.NoError(t, err)
	want = append(want, heldBy("end", end, ""))
	p.Restore()
	assert.Equal(t, want, observedUntil(t, states, "end"))
}

// A holder whose lease runs out, with nobody renewing or reading the key,
// is observed to go: the lease's end is reaped (by the Backend told of
// its expiry, or at the observer's timer), and the reap is a change like
// any other. The claim of another lease queued behind is observed next.
func TestObserveSeesALeaseRunOut(t *testing.T) {
	ctx := ctxFor(t)
	ob, _, prefix := newBackend(t)
	mb, _, _ := newBackendPrefix(t, prefix)
	short, err := mb.Grant(ctx, redisb.MinTTL)
	require.NoError(t, err)
	l := grant(t, mb, time.Minute)
	states := observe(t, ctx, ob, "runout")
	require.False(t, next(t, states).Held)
	h, err := mb.Acquire(ctx, request("runout", short, "H"))
	require.NoError(t, err)
	// Queued behind H, or (on a slow machine) arriving once H's lease has
	// run out: either way H's departure and its admission are observed.
	wc, err := mb.Acquire(ctx, request("runout", l, "end"))
	require.NoError(t, err)
	assert.Equal(t, []string{heldBy("H", h, ""), heldBy("end", wc, "")}, observedUntil(t, states, "end"))
}

// With keyspace notifications off, nothing tells any Backend that a
// lease ran out: the observer's own timer, set to the lease's end, reads
// the key, which reaps the holder, and its departure is observed.
func TestObserveSeesALeaseRunOutWithoutNotifications(t *testing.T) {
	ctx := ctxFor(t)
	notificationsOff(t)
	quiet := quietLogger()
	ob, _, prefix := newBackend(t, redisb.WithLogger(quiet))
	mb, _, _ := newBackendPrefix(t, prefix)
	short, err := mb.Grant(ctx, redisb.MinTTL)
	require.NoError(t, err)
	states := observe(t, ctx, ob, "runout-quiet")
	require.False(t, next(t, states).Held)
	h, err := mb.Acquire(ctx, request("runout-quiet", short, "H"))
	require.NoError(t, err)
	assert.Equal(t, heldBy("H", h, ""), holders(next(t, states)))
	assert.False(t, next(t, states).Held, "the holder whose lease ran out is still observed")
}
