package memory

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// These tests look at which waiting requests' channels a release closes:
// exactly those of the claims that now hold, and no other.

// waiting is a claim enqueued by hand and the channel that wakes it.
type waiting struct {
	c     *claim
	ready chan struct{}
}

func enqueueWaiting(t *testing.T, b *Backend, r backend.AcquireRequest) waiting {
	t.Helper()
	c, ready, err := b.enqueue(r)
	require.NoError(t, err)
	require.NotNil(t, ready, "request by %s holds at once, want it waiting", r.Owner)
	return waiting{c, ready}
}

// woken lists the indexes of ws whose channels are closed.
func woken(ws []waiting) []int {
	ids := []int{}
	for i, w := range ws {
		select {
		case <-w.ready:
			ids = append(ids, i)
		default:
		}
	}
	return ids
}

func kindRequest(key string, l backend.Lease, owner string, shared bool, permits int) backend.AcquireRequest {
	r := internalRequest(key, l, true)
	r.Owner, r.Shared, r.Permits = owner, shared, permits
	return r
}

func TestCountedReleaseWakesOnlyTheNextWaiter(t *testing.T) {
	b := New()
	defer b.Close()
	l, _ := b.Grant(t.Context(), time.Hour)
	var held []backend.Claim
	for _, o := range []string{"A", "B"} {
		c, err := b.Acquire(t.Context(), kindRequest("k", l, o, false, 2))
		require.NoError(t, err)
		held = append(held, c)
	}
	var ws []waiting
	for _, o := range []string{"W0", "W1", "W2"} {
		ws = append(ws, enqueueWaiting(t, b, kindRequest("k", l, o, false, 2)))
	}
	require.NoError(t, b.Release(t.Context(), held[0]))
	require.Equal(t, []int{0}, woken(ws))
	require.NoError(t, b.Release(t.Context(), held[1]))
	require.Equal(t, []int{0, 1}, woken(ws))
	_ = b.abandon(ws[0].c, nil)
	require.Equal(t, []int{0, 1, 2}, woken(ws))
	_ = b.abandon(ws[1].c, nil)
	_ = b.abandon(ws[2].c, nil)
}

func TestWriterReleaseWakesOnlyTheReadersUpToTheNextWriter(t *testing.T) {
	b := New()
	defer b.Close()
	l, _ := b.Grant(t.Context(), time.Hour)
	w, err := b.Acquire(t.Context(), kindRequest("k", l, "W", false, 0))
	require.NoError(t, err)
	var ws []waiting
	for _, shared := range []bool{true, true, true, false, true, false} {
		ws = append(ws, enqueueWaiting(t, b, kindRequest("k", l, "", shared, 0)))
	}
	require.NoError(t, b.Release(t.Context(), w))
	require.Equal(t, []int{0, 1, 2}, woken(ws), "after the writer's release")
	// The next writer (3) wakes only when the last of the readers goes;
	// then its release wakes the one reader (4) before the last writer.
	_ = b.abandon(ws[0].c, nil)
	_ = b.abandon(ws[2].c, nil)
	require.Equal(t, []int{0, 1, 2}, woken(ws), "with a reader still holding")
	_ = b.abandon(ws[1].c, nil)
	require.Equal(t, []int{0, 1, 2, 3}, woken(ws))
	_ = b.abandon(ws[3].c, nil)
	require.Equal(t, []int{0, 1, 2, 3, 4}, woken(ws))
	_ = b.abandon(ws[4].c, nil)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5}, woken(ws))
	_ = b.abandon(ws[5].c, nil)

	b.mu.Lock()
	defer b.mu.Unlock()
	for name, k := range b.keys {
		require.True(t, k.idle(), "key %q", name)
	}
}

// A multi-key claim is woken once, when it holds its last key; the release
// of each of its keys wakes only what it should there.
func TestMultiKeyWokenOnceWhenItHoldsEveryKey(t *testing.T) {
	b := New()
	defer b.Close()
	l, _ := b.Grant(t.Context(), time.Hour)
	ha, err := b.Acquire(t.Context(), internalRequest("a", l, true))
	require.NoError(t, err)
	hb, err := b.Acquire(t.Context(), internalRequest("b", l, true))
	require.NoError(t, err)
	mr := internalRequest("a", l, true)
	mr.Keys = []string{"a", "b"}
	ws := []waiting{
		enqueueWaiting(t, b, mr),
		enqueueWaiting(t, b, internalRequest("b", l, true)), // behind M at b
	}
	require.NoError(t, b.Release(t.Context(), ha))
	require.Equal(t, []int{}, woken(ws), "M holds a but not b")
	require.NoError(t, b.Release(t.Context(), hb))
	require.Equal(t, []int{0}, woken(ws))
	_ = b.abandon(ws[0].c, nil) // releases both keys: wakes the one behind at b
	require.Equal(t, []int{0, 1}, woken(ws))
	_ = b.abandon(ws[1].c, nil)
}
