package pgbackend_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// observed is what an observation yielded: its states and its error.
type observed struct {
	states chan backend.LockInfo
	errs   chan error
}

// observe runs b.Observe(key) until ctx ends. Its consumer takes the first
// state at once and every later one only once resume is closed, so that
// every change made before then waits in the observation.
func observe(ctx context.Context, b *postgres.Backend, key string, resume <-chan struct{}) *observed {
	o := &observed{states: make(chan backend.LockInfo, 1<<14), errs: make(chan error, 1)}
	go func() {
		first := true
		for info, err := range b.Observe(ctx, key) {
			if err != nil {
				o.errs <- err
				return
			}
			if !first {
				select {
				case <-resume:
				case <-ctx.Done():
					return
				}
			}
			first = false
			o.states <- info
		}
	}()
	return o
}

// next returns the next state that differs from last in its holders.
func (o *observed) next(t *testing.T, last backend.LockInfo, what string) backend.LockInfo {
	t.Helper()
	deadline := time.After(waitBound)
	for {
		select {
		case info := <-o.states:
			if !backend.SameHolders(last, info) {
				return info
			}
		case err := <-o.errs:
			t.Fatalf("%s: Observe yielded %v", what, err)
		case <-deadline:
			t.Fatalf("%s: no new state within %v", what, waitBound)
		}
	}
}

// holdersOf lists info's holders as "token owner=value", oldest first.
func holdersOf(info backend.LockInfo) string {
	var parts []string
	for _, h := range info.Holders {
		parts = append(parts, fmt.Sprintf("%d %s=%s", h.Token, h.Owner, h.Value))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Observe reports every change of the holders, in order, however fast
// they come: a chain of acquisitions, value changes, handoffs to waiters
// and a lease's end (one change with its waiter of the same key), all
// made while the consumer is not reading, so that an Observe that reads
// the key's state when it is signalled would report only the last.
func TestObserveReportsEveryChange(t *testing.T) {
	schema := uniqueSchema(t)
	b, _ := newBackend(t, schema)
	ob, _ := newBackendApp(t, schema, "observer")
	ctx := testCtx(t, 6*waitBound)
	const key = "chain"
	resume := make(chan struct{})
	o := observe(ctx, ob, key, resume)
	last := o.next(t, backend.LockInfo{Holders: []backend.Holder{{}}}, "first state")
	require.Empty(t, last.Holders)

	// want lists the states expected, as holdersOf writes them.
	var want []string
	note := func(holder string) { want = append(want, "["+holder+"]") }
	holder := func(c backend.Claim, owner, value string) string {
		return fmt.Sprintf("%d %s=%s", c.Token, owner, value)
	}
	lease, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)
	acquire := func(name, value string) backend.Claim {
		c, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, ID: name, Lease: lease.ID, Owner: name,
			Value: []byte(value), Wait: true, Fair: true})
		require.NoError(t, err)
		return c
	}
	for i := range 40 {
		name, value := fmt.Sprintf("o%d", i), fmt.Sprintf("v%d", i)
		c := acquire(name, value)
		note(holder(c, name, value))
		if i%4 == 0 {
			value = fmt.Sprintf("w%d", i)
			require.NoError(t, b.SetValue(ctx, c, []byte(value)))
			note(holder(c, name, value))
		}
		require.NoError(t, b.Release(ctx, c))
		note("")
	}
	for i := range 5 { // handoffs: the waiter holds the moment the holder leaves
		h := acquire(fmt.Sprintf("h%d", i), "h")
		note(holder(h, fmt.Sprintf("h%d", i), "h"))
		got := make(chan backend.Claim, 1)
		name := fmt.Sprintf("w%d", i)
		go func() {
			c, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, ID: name, Lease: lease.ID, Owner: name,
				Value: []byte("w"), Wait: true, Fair: true})
			assert.NoError(t, err)
			got <- c
		}()
		awaitWaiter(t, b, key, name)
		require.NoError(t, b.Release(ctx, h))
		var w backend.Claim
		select {
		case w = <-got:
		case <-time.After(waitBound):
			t.Fatalf("%s did not get the key", name)
		}
		note(holder(w, name, "w"))
		require.NoError(t, b.Release(ctx, w))
		note("")
	}
	// A lease's end, with a waiter of the same lease behind its holder:
	// one change.
	ends, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)
	h, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, ID: "end", Lease: ends.ID, Owner: "end", Wait: true, Fair: true})
	require.NoError(t, err)
	note(holder(h, "end", ""))
	waiting := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, ID: "behind", Lease: ends.ID, Owner: "behind", Wait: true, Fair: true})
		waiting <- err
	}()
	awaitWaiter(t, b, key, "behind")
	require.NoError(t, b.Revoke(ctx, ends.ID))
	note("")
	select {
	case err := <-waiting:
		require.Error(t, err, "a claim of a revoked lease acquired")
	case <-time.After(waitBound):
		t.Fatal("the revoked lease's waiter did not return")
	}

	close(resume)
	var got []string
	for range want {
		last = o.next(t, last, fmt.Sprintf("state %d of %d (so far %v)", len(got)+1, len(want), got))
		got = append(got, holdersOf(last))
	}
	require.Equal(t, want, got)
}

// A value too long for a notification's payload is read by the observer.
func TestObserveLongValues(t *testing.T) {
	schema := uniqueSchema(t)
	b, _ := newBackend(t, schema)
	ctx := testCtx(t, 3*waitBound)
	resume := make(chan struct{})
	close(resume)
	o := observe(ctx, b, "long", resume)
	last := o.next(t, backend.LockInfo{Holders: []backend.Holder{{}}}, "first state")
	lease, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)
	v1, v2 := bytes.Repeat([]byte("a"), 20<<10), bytes.Repeat([]byte("b"), backend.MaxValueLen)
	c, err := b.Acquire(ctx, backend.AcquireRequest{Key: "long", ID: "c", Lease: lease.ID, Owner: "c", Value: v1, Wait: true})
	require.NoError(t, err)
	last = o.next(t, last, "acquired")
	require.Len(t, last.Holders, 1)
	require.Equal(t, v1, last.Holders[0].Value)
	require.NoError(t, b.SetValue(ctx, c, v2))
	last = o.next(t, last, "value set")
	require.Len(t, last.Holders, 1)
	require.Equal(t, v2, last.Holders[0].Value)
	require.NoError(t, b.Release(ctx, c))
	require.Empty(t, o.next(t, last, "released").Holders)
}

// After its listener is cut, an observer reads the key's state again and
// goes on reporting each change; the Backend reports the gap.
func TestObserveAfterListenerCut(t *testing.T) {
	schema := uniqueSchema(t)
	b, _ := newBackend(t, schema)
	ctx := testCtx(t, 4*waitBound)
	gaps := make(chan [2]time.Time, 1)
	ob, err := postgres.New(ctx, pool(t, "cut-observer"), postgres.WithSchema(schema),
		postgres.WithListenerGapHook(func(from, to time.Time) {
			select {
			case gaps <- [2]time.Time{from, to}:
			default: // the first one is enough
			}
		}))
	require.NoError(t, err)
	t.Cleanup(func() { ob.Close() })
	resume := make(chan struct{})
	close(resume)
	o := observe(ctx, ob, "k", resume)
	last := o.next(t, backend.LockInfo{Holders: []backend.Holder{{}}}, "first state")
	lease, err := b.Grant(ctx, time.Minute)
	require.NoError(t, err)

	n, err := shared.Terminate(ctx, "cut-observer")
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1, "no connection of the observer's Backend was cut")
	c, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: "a", Lease: lease.ID, Owner: "a", Wait: true})
	require.NoError(t, err)
	last = o.next(t, last, "acquired while the listener was cut")
	require.Equal(t, c.Token, last.Token)
	select {
	case g := <-gaps:
		require.False(t, g[1].Before(g[0]), "a gap that ends before it begins: %v", g)
	case <-time.After(waitBound):
		t.Fatal("the Backend reported no gap of its listener")
	}
	for i := range 5 {
		require.NoError(t, b.SetValue(ctx, c, []byte{byte('0' + i)}))
		last = o.next(t, last, "value set")
		require.Equal(t, []byte{byte('0' + i)}, last.Holders[0].Value)
	}
	require.NoError(t, b.Release(ctx, c))
	require.Empty(t, o.next(t, last, "released").Holders)
}
