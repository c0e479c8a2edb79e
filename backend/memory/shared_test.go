package memory_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSharedReadersHoldTogether(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	var last uint64
	for _, o := range []string{"R1", "R2", "R3"} {
		c := mustAcquire(t, b, sharedReq("k", l, o))
		assert.True(t, c.Shared)
		assert.Equal(t, 1, c.Permits)
		assert.Equal(t, 0, c.Permit)
		assert.Greater(t, c.Token, last)
		last = c.Token
	}
	info := inspect(t, b, "k")
	assert.Equal(t, []string{"R1", "R2", "R3"}, holders(t, b, "k"))
	assert.Equal(t, "R1", info.Owner, "top-level fields are the oldest holder's")
	assert.Equal(t, 1, info.Permits)
	for _, h := range info.Holders {
		assert.True(t, h.Shared)
	}
}

// A writer queued behind readers waits for them, and readers arriving
// after it wait for the writer: readers never starve a writer.
func TestWriterExcludesReadersAndIsNotStarved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		r1 := mustAcquire(t, b, sharedReq("k", l, "R1"))
		w := start(t.Context(), b, request("k", l, "W"))
		synctest.Wait()
		r2 := start(t.Context(), b, sharedReq("k", l, "R2"))
		synctest.Wait()
		require.False(t, w.returned(), "writer holds beside a reader")
		require.False(t, r2.returned(), "a reader queued behind a writer overtook it")
		assert.Equal(t, []string{"W", "R2"}, waiters(t, b, "k"))
		if got := inspect(t, b, "k").Waiters; assert.Len(t, got, 2) {
			assert.False(t, got[0].Shared)
			assert.True(t, got[1].Shared)
		}
		_, err := b.Acquire(t.Context(), try(sharedReq("k", l, "T")))
		require.ErrorIs(t, err, errLocked, "TryAcquire of a reader with a writer queued")

		mustRelease(t, b, r1)
		wc := w.mustGet(t)
		synctest.Wait()
		require.False(t, r2.returned(), "a reader holds beside the writer")
		assert.Equal(t, []string{"W"}, holders(t, b, "k"))

		mustRelease(t, b, wc)
		rc := r2.mustGet(t)
		assert.Greater(t, rc.Token, wc.Token)
		mustRelease(t, b, rc)
		requireFree(t, b, "k")
	})
}

// A writer's release admits, at once, every reader queued up to the next
// writer, and wakes no one else.
func TestWriterReleaseAdmitsReadersUpToNextWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		w1 := mustAcquire(t, b, request("k", l, "W1"))
		var rs []*bg
		for _, o := range []string{"R1", "R2", "R3"} {
			rs = append(rs, start(t.Context(), b, sharedReq("k", l, o)))
			synctest.Wait()
		}
		w2 := start(t.Context(), b, request("k", l, "W2"))
		synctest.Wait()
		r4 := start(t.Context(), b, sharedReq("k", l, "R4"))
		synctest.Wait()

		mustRelease(t, b, w1)
		synctest.Wait()
		for _, r := range rs {
			require.True(t, r.returned(), "a reader ahead of the next writer was not admitted")
			r.mustGet(t)
		}
		require.False(t, w2.returned(), "the next writer was admitted with readers")
		require.False(t, r4.returned(), "a reader behind the next writer was admitted")
		assert.Equal(t, []string{"R1", "R2", "R3"}, holders(t, b, "k"))
		assert.Equal(t, []string{"W2", "R4"}, waiters(t, b, "k"))

		// The writer waits for the last reader, whatever the order they
		// leave in.
		for i, r := range []*bg{rs[1], rs[2], rs[0]} {
			mustRelease(t, b, r.claim)
			synctest.Wait()
			require.Equal(t, i == 2, w2.returned(), "writer after %d of 3 readers left", i+1)
		}
		w2c := w2.mustGet(t)
		mustRelease(t, b, w2c)
		mustRelease(t, b, r4.mustGet(t))
		requireFree(t, b, "k")
	})
}
