package memory_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// TryAcquire (Wait false) succeeds exactly when a claim made now would
// hold every key at once, and a refusal leaves nothing behind.
func TestTryAcquireKinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		refused := func(r backend.AcquireRequest, why string) {
			t.Helper()
			for _, fair := range []bool{true, false} {
				r := try(r)
				r.Fair = fair
				_, err := b.Acquire(t.Context(), r)
				require.ErrorIs(t, err, backend.ErrLocked, "%s (fair %v)", why, fair)
			}
		}
		granted := func(r backend.AcquireRequest, why string) backend.Claim {
			t.Helper()
			c, err := b.Acquire(t.Context(), try(r))
			require.NoError(t, err, why)
			return c
		}

		// Exclusive holder: nothing else.
		x := mustAcquire(t, b, request("x", l, "X"))
		refused(request("x", l, "T"), "exclusive beside an exclusive holder")
		refused(sharedReq("x", l, "T"), "shared beside an exclusive holder")
		mustRelease(t, b, x)

		// Shared holder: readers yes, a writer no; a queued writer
		// closes the door to readers too.
		r1 := granted(sharedReq("s", l, "R1"), "first reader")
		r2 := granted(sharedReq("s", l, "R2"), "reader beside a reader")
		refused(request("s", l, "T"), "writer beside readers")
		w := start(t.Context(), b, request("s", l, "W"))
		synctest.Wait()
		refused(sharedReq("s", l, "T"), "reader with a writer queued")
		mustRelease(t, b, r1)
		mustRelease(t, b, r2)
		mustRelease(t, b, w.mustGet(t))

		// Counted: up to n, then no.
		c1 := granted(countedReq("c", l, "C1", 2), "first of two permits")
		c2 := granted(countedReq("c", l, "C2", 2), "second of two permits")
		refused(countedReq("c", l, "T", 2), "third of two permits")
		mustRelease(t, b, c1)
		c3 := granted(countedReq("c", l, "C3", 2), "a freed permit")
		assert.Equal(t, c1.Permit, c3.Permit)
		mustRelease(t, b, c2)
		mustRelease(t, b, c3)

		// Multi-key: refused if any key is taken, taking none of the
		// free ones.
		hb := mustAcquire(t, b, request("b", l, "Hb"))
		refused(multiReq(l, "T", "a", "b", "c"), "multi-key with one key held")
		requireFree(t, b, "a")
		requireFree(t, b, "c")
		assert.Equal(t, []string{"Hb"}, holders(t, b, "b"))
		assert.Empty(t, waiters(t, b, "b"))
		mustRelease(t, b, hb)
		m := granted(multiReq(l, "M", "a", "b", "c"), "multi-key with every key free")
		mustRelease(t, b, m)

		for _, k := range []string{"x", "s", "c", "a", "b"} {
			requireFree(t, b, k)
		}
	})
}

// A waiter of any kind whose context ends leaves nothing behind and does
// not hold up the waiters behind it. (Counted waiters: see
// TestCancelledCountedWaiter.)
func TestCancelledWaiterOfEachKind(t *testing.T) {
	kinds := []struct {
		name   string
		holder func(l backend.Lease) backend.AcquireRequest // holds "k" (and maybe more)
		waiter func(l backend.Lease) backend.AcquireRequest // cancelled
		next   func(l backend.Lease) backend.AcquireRequest // queued behind, must then hold
	}{
		{"Exclusive",
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "H") },
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "C") },
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "N") }},
		{"SharedBehindWriter",
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "H") },
			func(l backend.Lease) backend.AcquireRequest { return sharedReq("k", l, "C") },
			func(l backend.Lease) backend.AcquireRequest { return sharedReq("k", l, "N") }},
		{"WriterBetweenReaders",
			func(l backend.Lease) backend.AcquireRequest { return sharedReq("k", l, "H") },
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "C") },
			func(l backend.Lease) backend.AcquireRequest { return sharedReq("k", l, "N") }},
		{"MultiKey",
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "H") },
			func(l backend.Lease) backend.AcquireRequest { return multiReq(l, "C", "a", "k", "z") },
			func(l backend.Lease) backend.AcquireRequest { return request("a", l, "N") }},
		{"NonFairMultiKey",
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "H") },
			func(l backend.Lease) backend.AcquireRequest { return unfair(multiReq(l, "C", "a", "k")) },
			func(l backend.Lease) backend.AcquireRequest { return unfair(request("k", l, "N")) }},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBackend(t)
				l := grant(t, b, time.Hour)
				h := mustAcquire(t, b, kind.holder(l))
				ctx, cancel := context.WithCancel(t.Context())
				c := start(ctx, b, kind.waiter(l))
				synctest.Wait()
				n := start(t.Context(), b, kind.next(l))
				synctest.Wait()
				require.False(t, c.returned(), "the waiter did not wait")

				cancel()
				_, err := c.wait(t)
				require.ErrorIs(t, err, context.Canceled)
				for _, w := range inspect(t, b, "k").Waiters {
					assert.NotEqual(t, "C", w.Owner, "the cancelled claim is still queued")
				}
				if kind.name == "MultiKey" {
					// N was queued behind C at "a": it holds at once.
					mustRelease(t, b, n.mustGet(t))
					mustRelease(t, b, h)
				} else {
					mustRelease(t, b, h)
					mustRelease(t, b, n.mustGet(t))
				}
				for _, k := range []string{"k", "a", "z"} {
					requireFree(t, b, k)
				}
			})
		})
	}
}

func TestCancelledCountedWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		h1 := mustAcquire(t, b, countedReq("k", l, "H1", 2))
		h2 := mustAcquire(t, b, countedReq("k", l, "H2", 2))
		ctx, cancel := context.WithCancel(t.Context())
		c := start(ctx, b, countedReq("k", l, "C", 2))
		synctest.Wait()
		n := start(t.Context(), b, countedReq("k", l, "N", 2))
		synctest.Wait()
		cancel()
		_, err := c.wait(t)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, []string{"N"}, waiters(t, b, "k"))
		mustRelease(t, b, h2)
		nc := n.mustGet(t)
		assert.Equal(t, h2.Permit, nc.Permit)
		mustRelease(t, b, h1)
		mustRelease(t, b, nc)
		requireFree(t, b, "k")
	})
}

func TestInvalidRequestsLeaveNothing(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	nineKeys := []string{"k", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"}
	tooMany := []string{"k"}
	for i := range backend.MaxKeys {
		tooMany = append(tooMany, "k"+strings.Repeat("z", i+1))
	}
	key, cfg := backend.ErrInvalidKey, backend.ErrInvalidConfig
	for _, tc := range []struct {
		name string
		want error
		bad  func(r *backend.AcquireRequest)
	}{
		{"empty key", key, func(r *backend.AcquireRequest) { r.Key = "" }},
		{"control character in key", key, func(r *backend.AcquireRequest) { r.Key = "k\n" }},
		{"negative permits", cfg, func(r *backend.AcquireRequest) { r.Permits = -1 }},
		{"too many permits", cfg, func(r *backend.AcquireRequest) { r.Permits = backend.MaxPermits + 1 }},
		{"shared with permits", cfg, func(r *backend.AcquireRequest) { r.Shared, r.Permits = true, 2 }},
		{"value too long", cfg, func(r *backend.AcquireRequest) { r.Value = make([]byte, backend.MaxValueLen+1) }},
		{"value too long for its keys", cfg, func(r *backend.AcquireRequest) {
			r.Keys, r.Value = nineKeys, make([]byte, backend.MaxValueLen) // over MaxValueTotal in all
		}},
		{"owner label not UTF-8", cfg, func(r *backend.AcquireRequest) { r.Owner = "\xff" }},
		{"multi-key with permits", cfg, func(r *backend.AcquireRequest) { r.Keys, r.Permits = []string{"k", "m"}, 2 }},
		{"no keys", key, func(r *backend.AcquireRequest) { r.Keys = []string{} }},
		{"unsorted keys", key, func(r *backend.AcquireRequest) { r.Keys = []string{"k", "b"} }},
		{"duplicate keys", key, func(r *backend.AcquireRequest) { r.Keys = []string{"k", "k"} }},
		{"Keys[0] is not Key", cfg, func(r *backend.AcquireRequest) { r.Keys = []string{"a", "k"} }},
		{"too many keys", cfg, func(r *backend.AcquireRequest) { r.Keys = tooMany }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := request("k", l, "bad")
			tc.bad(&r)
			_, err := b.Acquire(t.Context(), r)
			require.ErrorIs(t, err, tc.want)
			for _, k := range append([]string{"k", "a", "b", "m"}, r.Keys...) {
				requireFree(t, b, k)
			}
		})
	}
	// The limits themselves are fine.
	ok := request("k", l, "limits")
	ok.Permits = backend.MaxPermits
	ok.Value = make([]byte, backend.MaxValueLen)
	mustRelease(t, b, mustAcquire(t, b, ok))
	ok.Permits, ok.Keys = 0, nineKeys[:backend.MaxValueTotal/backend.MaxValueLen]
	mustRelease(t, b, mustAcquire(t, b, ok))
	ok.Keys, ok.Value = nineKeys, nil
	m := mustAcquire(t, b, ok)
	require.ErrorIs(t, b.SetValue(t.Context(), m, make([]byte, backend.MaxValueLen)), backend.ErrInvalidConfig)
	mustRelease(t, b, m)
}

func TestSetValue(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	r := request("k", l, "H")
	r.Value = []byte("v1")
	c := mustAcquire(t, b, r)
	r.Value[0] = 'X' // the store keeps its own copy
	assert.Equal(t, []byte("v1"), c.Value)
	assert.Equal(t, []byte("v1"), inspect(t, b, "k").Holders[0].Value)

	v := []byte("v2")
	require.NoError(t, b.SetValue(t.Context(), c, v))
	v[0] = 'X'
	assert.Equal(t, []byte("v2"), inspect(t, b, "k").Holders[0].Value)
	assert.Equal(t, []byte("v1"), c.Value, "an earlier Claim.Value is not written into")
	// Inspect hands out copies.
	inspect(t, b, "k").Holders[0].Value[0] = 'X'
	assert.Equal(t, []byte("v2"), inspect(t, b, "k").Holders[0].Value)

	err := b.SetValue(t.Context(), c, make([]byte, backend.MaxValueLen+1))
	require.ErrorIs(t, err, backend.ErrInvalidConfig)

	// A claim with the right key but another token is not c.
	stale := c
	stale.Token++
	require.ErrorIs(t, b.SetValue(t.Context(), stale, []byte("stale")), backend.ErrLeaseExpired)
	assert.Equal(t, []byte("v2"), inspect(t, b, "k").Holders[0].Value)

	mustRelease(t, b, c)
	err = b.SetValue(t.Context(), c, []byte("v3"))
	require.ErrorIs(t, err, backend.ErrLeaseExpired)
	requireFree(t, b, "k")

	// A multi-key claim's value is shown at every key.
	m := mustAcquire(t, b, multiReq(l, "M", "a", "b"))
	assert.Nil(t, m.Value)
	require.NoError(t, b.SetValue(t.Context(), m, []byte("both")))
	for _, k := range []string{"a", "b"} {
		assert.Equal(t, []byte("both"), inspect(t, b, k).Holders[0].Value, k)
	}
	mustRelease(t, b, m)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	c = mustAcquire(t, b, request("k", l, "H"))
	require.ErrorIs(t, b.SetValue(ctx, c, nil), context.Canceled)
	require.NoError(t, b.Close())
	require.ErrorIs(t, b.SetValue(t.Context(), c, nil), backend.ErrClosed)
}

func TestInspectHolders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		var held []backend.Claim
		for _, o := range []string{"A", "B", "C"} {
			r := countedReq("pool", l, o, 3)
			r.Value = []byte("value of " + o)
			held = append(held, mustAcquire(t, b, r))
			time.Sleep(time.Second) // distinct acquisition times, on the bubble's clock
		}
		start(t.Context(), b, countedReq("pool", l, "W", 3))
		synctest.Wait()
		mustRelease(t, b, held[1]) // W takes permit 1, and is the newest holder
		synctest.Wait()

		info := inspect(t, b, "pool")
		require.Len(t, info.Holders, 3)
		assert.Equal(t, 3, info.Permits)
		assert.Empty(t, info.Waiters)
		want := []struct {
			owner  string
			permit int
			value  string
		}{{"A", 0, "value of A"}, {"C", 2, "value of C"}, {"W", 1, ""}}
		for i, w := range want {
			h := info.Holders[i]
			assert.Equal(t, w.owner, h.Owner)
			assert.Equal(t, w.permit, h.Permit, w.owner)
			assert.Equal(t, w.value, string(h.Value), w.owner)
			assert.False(t, h.Shared)
			assert.False(t, h.AcquiredAt.IsZero())
			if i > 0 {
				assert.Greater(t, h.Token, info.Holders[i-1].Token, "oldest first")
			}
		}
		assert.Equal(t, held[0].Token, info.Token)
		assert.Equal(t, "A", info.Owner)
		assert.Equal(t, held[0].AcquiredAt, info.AcquiredAt)
		assert.True(t, info.Held)

		// A multi-key claim waiting at one key is a waiter, not a holder,
		// at the others.
		hy := mustAcquire(t, b, request("y", l, "Hy"))
		start(t.Context(), b, multiReq(l, "M", "x", "y"))
		synctest.Wait()
		x := inspect(t, b, "x")
		assert.False(t, x.Held)
		assert.Equal(t, 1, x.Permits, "a queued claim sets the key's count")
		assert.Equal(t, []string{"M"}, waiters(t, b, "x"))
		mustRelease(t, b, hy)
		synctest.Wait()
		assert.Equal(t, []string{"M"}, holders(t, b, "x"))
		assert.Equal(t, []string{"M"}, holders(t, b, "y"))
		// The holders and waiters end with the bubble's context.
	})
}
