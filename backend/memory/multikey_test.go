package memory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

func TestMultiKeyHoldsEveryKeyWithOneToken(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	// Histories of different lengths: the token exceeds each key's.
	var last uint64
	for _, k := range []string{"a", "a", "c"} {
		c := mustAcquire(t, b, request(k, l, "earlier"))
		last = c.Token
		mustRelease(t, b, c)
	}
	keys := []string{"a", "b", "c"}
	m := mustAcquire(t, b, multiReq(l, "M", keys...))
	assert.Equal(t, "a", m.Key)
	assert.Equal(t, keys, m.Keys)
	assert.Equal(t, keys, m.AllKeys())
	assert.Greater(t, m.Token, last)
	for _, k := range keys {
		info := inspect(t, b, k)
		assert.True(t, info.Held, k)
		assert.Equal(t, m.Token, info.Token, "token at %s", k)
		assert.Equal(t, []string{"M"}, holders(t, b, k))
		_, err := b.Acquire(t.Context(), try(request(k, l, "T")))
		assert.ErrorIs(t, err, backend.ErrLocked, "TryAcquire %s", k)
	}
	mustRelease(t, b, m)
	for _, k := range keys {
		requireFree(t, b, k)
	}
}

// A multi-key request takes no key early: it keeps its place at every key
// (later claims there queue behind it) and holds them all at once.
func TestMultiKeyWaitsForEveryKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		hb := mustAcquire(t, b, request("b", l, "Hb"))
		m := start(t.Context(), b, multiReq(l, "M", "a", "b", "c"))
		synctest.Wait()
		pa := start(t.Context(), b, request("a", l, "Pa"))
		synctest.Wait()
		require.False(t, m.returned())
		require.False(t, pa.returned(), "a later claim overtook the multi-key request at a free key")
		assert.Empty(t, holders(t, b, "a"), "the multi-key request holds a key early")
		assert.Equal(t, []string{"M", "Pa"}, waiters(t, b, "a"))
		assert.Equal(t, []string{"M"}, waiters(t, b, "c"))

		mustRelease(t, b, hb)
		mc := m.mustGet(t)
		for _, k := range []string{"a", "b", "c"} {
			assert.Equal(t, mc.Token, inspect(t, b, k).Token, "holder of %s", k)
		}
		synctest.Wait()
		require.False(t, pa.returned())
		mustRelease(t, b, mc) // frees all three keys at once
		mustRelease(t, b, pa.mustGet(t))
		for _, k := range []string{"a", "b", "c"} {
			requireFree(t, b, k)
		}
	})
}

// Workers take random overlapping sets of keys, of every kind and in both
// fair and non-fair mode, alongside single-key claims: nothing deadlocks
// (the test ends within its timeout), and no key ever has an exclusive
// holder beside any other holder. (A caller's order of keys never reaches
// the store: requests carry them sorted, so "opposite orders" are the
// same request here; what could deadlock is overlapping sets queued at
// different times, which one token per claim orders the same way at every
// key.)
func TestMultiKeyNeverDeadlocks(t *testing.T) {
	const workers, rounds = 12, 150
	allKeys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	var mu sync.Mutex
	readers := map[string]int{}
	writers := map[string]int{}
	var errs []string
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Sprintf(format, args...))
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range rounds {
				var keys []string
				for _, k := range allKeys {
					if rng.IntN(3) == 0 {
						keys = append(keys, k)
					}
				}
				if len(keys) == 0 {
					j := rng.IntN(len(allKeys))
					keys = allKeys[j : j+1]
				}
				r := multiReq(l, fmt.Sprint("w", w), keys...)
				if len(keys) == 1 && rng.IntN(2) == 0 {
					r.Keys = nil // a plain single-key claim
				}
				r.Shared = rng.IntN(2) == 0
				r.Fair = rng.IntN(4) != 0
				c, err := b.Acquire(ctx, r)
				if err != nil {
					mu.Lock()
					fail("worker %d round %d on %v: %v", w, i, keys, err)
					mu.Unlock()
					return
				}
				mu.Lock()
				if c.Token == 0 {
					fail("token 0")
				}
				for _, k := range keys {
					if writers[k] > 0 || (!r.Shared && readers[k] > 0) {
						fail("worker %d (shared %v) holds %s beside %d writers and %d readers", w, r.Shared, k, writers[k], readers[k])
					}
					if r.Shared {
						readers[k]++
					} else {
						writers[k]++
					}
				}
				mu.Unlock()
				runtime.Gosched() // hold a moment, so that claims overlap

				mu.Lock()
				for _, k := range keys {
					if r.Shared {
						readers[k]--
					} else {
						writers[k]--
					}
				}
				mu.Unlock()
				if err := b.Release(ctx, c); err != nil {
					mu.Lock()
					fail("release: %v", err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	for _, k := range allKeys {
		requireFree(t, b, k)
	}
}

// Non-fair multi-key requests wait outside the queues until every key is
// free for them at once, and queued requests go first.
func TestMultiKeyNonFair(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		ha := mustAcquire(t, b, request("a", l, "Ha"))
		hb := mustAcquire(t, b, request("b", l, "Hb"))
		n := start(t.Context(), b, unfair(multiReq(l, "N", "a", "b")))
		synctest.Wait()
		assert.Empty(t, waiters(t, b, "a"), "a non-fair request is listed as queued")

		mustRelease(t, b, ha)
		synctest.Wait()
		require.False(t, n.returned(), "non-fair request holds with one key of two free")
		requireFree(t, b, "a") // and it keeps no place at a

		// A fair request queued at b goes first.
		fb := start(t.Context(), b, request("b", l, "Fb"))
		synctest.Wait()
		mustRelease(t, b, hb)
		fc := fb.mustGet(t)
		synctest.Wait()
		require.False(t, n.returned())

		mustRelease(t, b, fc)
		nc := n.mustGet(t)
		assert.Greater(t, nc.Token, fc.Token, "a non-fair request takes its token when it holds")
		for _, k := range []string{"a", "b"} {
			assert.Equal(t, nc.Token, inspect(t, b, k).Token)
		}
		mustRelease(t, b, nc)
		requireFree(t, b, "a")
		requireFree(t, b, "b")
	})
}

// A multi-key claim gets the highest stamp recorded at any of its keys and
// records its own at each.
func TestMultiKeyStamps(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	for k, wall := range map[string]int64{"a": 100, "b": 300} {
		c := mustAcquire(t, b, stampWith(request(k, l, "x"), func(backend.Timestamp) (backend.Timestamp, error) {
			return backend.Timestamp{WallTime: wall}, nil
		}))
		mustRelease(t, b, c)
	}
	var prev backend.Timestamp
	m := mustAcquire(t, b, stampWith(multiReq(l, "M", "a", "b", "c"), func(p backend.Timestamp) (backend.Timestamp, error) {
		prev = p
		return backend.Timestamp{WallTime: 400}, nil
	}))
	assert.Equal(t, int64(300), prev.WallTime, "highest stamp over the keys")
	assert.Equal(t, int64(400), m.Stamp.WallTime)
	mustRelease(t, b, m)
	for _, k := range []string{"a", "b", "c"} {
		var got backend.Timestamp
		c := mustAcquire(t, b, stampWith(request(k, l, "after"), func(p backend.Timestamp) (backend.Timestamp, error) {
			got = p
			return p, nil
		}))
		assert.Equal(t, int64(400), got.WallTime, "stamp recorded at %s", k)
		mustRelease(t, b, c)
	}
}

// Losing a multi-key claim at one key loses all of it, with one OnLost.
func TestMultiKeyLostAtOneKeyLosesAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		lost := newLost()
		r := multiReq(l, "M", "a", "b", "c")
		r.OnLost = backend.LossFunc(lost.onLost)
		mustAcquire(t, b, r)
		wa := start(t.Context(), b, request("a", l, "Wa"))
		wc := start(t.Context(), b, sharedReq("c", l, "Wc"))
		synctest.Wait()

		require.True(t, b.DeleteClaim("b"))
		require.ErrorIs(t, lost.await(t), backend.ErrLeaseExpired)
		mustRelease(t, b, wa.mustGet(t))
		mustRelease(t, b, wc.mustGet(t))
		synctest.Wait()
		assert.Equal(t, 1, lost.count(), "OnLost calls for one claim on three keys")
		for _, k := range []string{"a", "b", "c"} {
			requireFree(t, b, k)
		}
	})
}
