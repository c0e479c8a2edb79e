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

// Every kind of claim, whichever way it ends, leaves no record behind but
// the one parked key, and no permit marked held.
func TestNothingLeftBehindByAnyKind(t *testing.T) {
	b := New()
	defer b.Close()
	ctx := t.Context()
	l, err := b.Grant(ctx, time.Hour)
	require.NoError(t, err)
	other, err := b.Grant(ctx, time.Hour)
	require.NoError(t, err)
	multi := func(lease backend.Lease, fair bool, keys ...string) backend.AcquireRequest {
		r := internalRequest(keys[0], lease, fair)
		r.Keys = keys
		return r
	}

	// Held, then released: counted, shared, multi-key.
	var held []backend.Claim
	for _, r := range []backend.AcquireRequest{
		kindRequest("pool", l, "P", false, 3),
		kindRequest("pool", l, "P", false, 3),
		kindRequest("rw", l, "R", true, 0),
		multi(l, true, "m1", "m2", "m3"),
	} {
		c, err := b.Acquire(ctx, r)
		require.NoError(t, err)
		held = append(held, c)
	}
	// Waiting, then abandoned: a fair and a non-fair multi-key request, a
	// writer behind the reader, a counted waiter behind a full pool.
	full, err := b.Acquire(ctx, kindRequest("pool", l, "P", false, 3))
	require.NoError(t, err)
	var ws []waiting
	for _, r := range []backend.AcquireRequest{
		multi(l, true, "m0", "m2"),
		multi(l, false, "m3", "m4"),
		kindRequest("rw", l, "W", false, 0),
		kindRequest("pool", l, "P", false, 3),
	} {
		ws = append(ws, enqueueWaiting(t, b, r))
	}
	for _, w := range ws {
		_ = b.abandon(w.c, nil)
	}
	for _, c := range append(held, full) {
		require.NoError(t, b.Release(ctx, c))
	}
	// Lost with their lease, holding and waiting.
	_, err = b.Acquire(ctx, multi(other, true, "m1", "m5"))
	require.NoError(t, err)
	_, _, err = b.enqueue(multi(other, true, "m5", "m6"))
	require.NoError(t, err)
	_, _, err = b.enqueue(multi(other, false, "m1", "m7"))
	require.NoError(t, err)
	require.NoError(t, b.Revoke(ctx, other.ID))
	require.NoError(t, b.Revoke(ctx, l.ID))

	b.mu.Lock()
	defer b.mu.Unlock()
	require.LessOrEqual(t, len(b.keys), 1, "idle key records left")
	for name, k := range b.keys {
		require.True(t, k.idle(), "key %q", name)
		require.Nil(t, k.frontier, "key %q", name)
		require.Zero(t, k.nFree, "key %q", name)
		require.Zero(t, k.nFreeNonSh, "key %q", name)
		if k.used != nil {
			require.Equal(t, backend.PermitSet{}, *k.used, "key %q: permits still marked held", name)
		}
	}
	require.Empty(t, b.leases)
}
