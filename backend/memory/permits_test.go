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

// Holders of a counted key get distinct permits, each the lowest free one;
// a release admits exactly the next waiter, into the permit it freed.
func TestCountedPermitsAreDistinctAndLowestFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		var held []backend.Claim
		for i, o := range []string{"A", "B", "C"} {
			c := mustAcquire(t, b, countedReq("k", l, o, 3))
			assert.Equal(t, i, c.Permit, "holder %s", o)
			assert.Equal(t, 3, c.Permits)
			assert.False(t, c.Shared)
			held = append(held, c)
		}
		d := start(t.Context(), b, countedReq("k", l, "D", 3))
		synctest.Wait()
		e := start(t.Context(), b, countedReq("k", l, "E", 3))
		synctest.Wait()
		require.False(t, d.returned(), "a fourth holder of three permits")
		assert.Equal(t, []string{"D", "E"}, waiters(t, b, "k"))

		mustRelease(t, b, held[1]) // permit 1
		dc := d.mustGet(t)
		synctest.Wait()
		require.False(t, e.returned(), "one release admitted two waiters")
		assert.Equal(t, 1, dc.Permit, "D takes the permit B freed")

		mustRelease(t, b, held[2]) // permit 2
		ec := e.mustGet(t)
		assert.Equal(t, 2, ec.Permit)

		// Permits 0 and 2 freed: the next holder takes the lowest.
		mustRelease(t, b, held[0])
		mustRelease(t, b, ec)
		fc := mustAcquire(t, b, countedReq("k", l, "F", 3))
		assert.Equal(t, 0, fc.Permit)
		info := inspect(t, b, "k")
		assert.Equal(t, 3, info.Permits)
		assert.Equal(t, []string{"D", "F"}, holders(t, b, "k"))
		mustRelease(t, b, dc)
		mustRelease(t, b, fc)
		requireFree(t, b, "k")
	})
}

// Under contention, no two holders ever share a permit, there are never
// more than n, and every token issued for a permit exceeds the earlier
// tokens of that permit.
func TestPermitTokensIncreasePerPermit(t *testing.T) {
	const n, workers, rounds = 3, 8, 200
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	var mu sync.Mutex
	inUse := map[int]bool{}
	lastToken := map[int]uint64{}
	var errs []string
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				r := countedReq("pool", l, fmt.Sprint("w", w), n)
				r.Fair = rand.IntN(4) != 0 // a few non-fair requests too
				c, err := b.Acquire(ctx, r)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("worker %d round %d: %v", w, i, err))
					mu.Unlock()
					return
				}
				mu.Lock()
				switch {
				case c.Permit < 0 || c.Permit >= n:
					errs = append(errs, fmt.Sprintf("permit %d outside 0..%d", c.Permit, n-1))
				case inUse[c.Permit]:
					errs = append(errs, fmt.Sprintf("permit %d held twice", c.Permit))
				case c.Token <= lastToken[c.Permit]:
					errs = append(errs, fmt.Sprintf("permit %d: token %d after %d", c.Permit, c.Token, lastToken[c.Permit]))
				}
				inUse[c.Permit] = true
				lastToken[c.Permit] = c.Token
				mu.Unlock()
				runtime.Gosched() // hold a moment, so that holders overlap

				mu.Lock()
				delete(inUse, c.Permit)
				mu.Unlock()
				if err := b.Release(ctx, c); err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	t.Logf("permits used: %d of %d", len(lastToken), n)
	requireFree(t, b, "pool")
}

// A request whose permit count differs from the key's queued claims fails
// with ErrPermitMismatch, whatever its kind, and leaves nothing behind.
func TestPermitMismatchLeavesNothing(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	h := mustAcquire(t, b, countedReq("k", l, "H", 3))

	for _, r := range []backend.AcquireRequest{
		countedReq("k", l, "two", 2),
		request("k", l, "exclusive"),
		sharedReq("k", l, "shared"),
		try(countedReq("k", l, "try", 4)),
		unfair(request("k", l, "unfair")),
		multiReq(l, "multi", "a", "k", "z"),
	} {
		_, err := b.Acquire(t.Context(), r)
		require.ErrorIs(t, err, backend.ErrPermitMismatch, "request by %s", r.Owner)
		info := inspect(t, b, "k")
		assert.Equal(t, []string{"H"}, holders(t, b, "k"), "after the request by %s", r.Owner)
		assert.Empty(t, info.Waiters, "after the request by %s", r.Owner)
		assert.Equal(t, 3, info.Permits)
	}
	requireFree(t, b, "a")
	requireFree(t, b, "z")

	// Exclusive claims count as one permit: a counted request fails there.
	x := mustAcquire(t, b, request("x", l, "X"))
	_, err := b.Acquire(t.Context(), countedReq("x", l, "three", 3))
	require.ErrorIs(t, err, backend.ErrPermitMismatch)
	mustRelease(t, b, x)

	// Once the key's claims are gone, another count is fine.
	mustRelease(t, b, h)
	c := mustAcquire(t, b, countedReq("k", l, "two", 2))
	assert.Equal(t, 2, inspect(t, b, "k").Permits)
	mustRelease(t, b, c)
	requireFree(t, b, "k")
}
