package etcdbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// A waiter of every kind whose enqueue committed but whose reply was lost
// sends the enqueue again, finds the claim its lost attempt made under its
// name, takes it over and keeps its place in the queue: once the key is
// free for it, it holds, ahead of a waiter that queued after it, and
// nothing else of it is left in etcd.
func TestLostEnqueueReplyKeepsPlaceOfEveryKind(t *testing.T) {
	kinds := []struct {
		name    string
		holders []backend.AcquireRequest // hold k first; the first is released to admit W1
		w1, w2  func(l backend.Lease) backend.AcquireRequest
	}{
		{"exclusive", []backend.AcquireRequest{{Key: "k"}},
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "W1") },
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "W2") }},
		{"shared", []backend.AcquireRequest{{Key: "k"}},
			func(l backend.Lease) backend.AcquireRequest { return sharedReq("k", l, "W1") },
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "W2") }},
		{"counted", []backend.AcquireRequest{{Key: "k", Permits: 2}, {Key: "k", Permits: 2}},
			func(l backend.Lease) backend.AcquireRequest { return countedReq("k", l, "W1", 2) },
			func(l backend.Lease) backend.AcquireRequest { return countedReq("k", l, "W2", 2) }},
		{"multi-key", []backend.AcquireRequest{{Key: "k"}},
			func(l backend.Lease) backend.AcquireRequest {
				r := request("a", l, "W1")
				r.Keys = []string{"a", "k"}
				return r
			},
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "W2") }},
		{"shared multi-key", []backend.AcquireRequest{{Key: "k"}},
			func(l backend.Lease) backend.AcquireRequest {
				r := sharedReq("a", l, "W1")
				r.Keys = []string{"a", "k"}
				return r
			},
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "W2") }},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			d, b, cli := newDroppingBackend(t, prefix)
			hl := grant(t, b, 30*time.Second)
			holders := make([]backend.Claim, len(kind.holders))
			for i, h := range kind.holders {
				r := request(h.Key, hl, "holder")
				r.Permits = h.Permits
				holders[i] = acquire(t, b, r)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 2*waitBound)
			defer cancel()
			close(d.armed)
			w1 := start(ctx, b, kind.w1(grant(t, b, 30*time.Second)))
			awaitDropped(t, d)
			// W1's claim is in etcd now: W2 queues behind it.
			w2 := start(ctx, b, kind.w2(grant(t, b, 30*time.Second)))
			awaitCount(t, cli, prefix+"claims/k/", int64(len(holders)+2))

			release(t, b, holders[0])
			r1 := await(t, w1, "W1")
			require.NoError(t, r1.err, "W1, whose enqueue reply was lost")
			notYet(t, w2, "W2, queued behind W1")
			release(t, b, r1.claim)
			r2 := await(t, w2, "W2")
			require.NoError(t, r2.err, "W2")
			assert.Greater(t, r2.claim.Token, r1.claim.Token, "W2 queued after W1")
			release(t, b, r2.claim)
			for _, h := range holders[1:] {
				release(t, b, h)
			}
			assert.Empty(t, keys(t, cli, prefix+"claims/"), "claims left")
		})
	}
}

// A request whose enqueue committed but whose reply was lost, and which
// disagrees with the claim ahead of it on the permit count, fails with
// ErrPermitMismatch after taking its claim over, as it would have with the
// reply, and leaves nothing behind.
func TestLostEnqueueReplyStillChecksPermits(t *testing.T) {
	kinds := []struct {
		name   string
		holder backend.AcquireRequest // holds k
		req    func(l backend.Lease) backend.AcquireRequest
	}{
		{"exclusive behind counted", backend.AcquireRequest{Key: "k", Permits: 2},
			func(l backend.Lease) backend.AcquireRequest { return request("k", l, "W") }},
		{"counted behind exclusive", backend.AcquireRequest{Key: "k"},
			func(l backend.Lease) backend.AcquireRequest { return countedReq("k", l, "W", 3) }},
		{"shared behind counted", backend.AcquireRequest{Key: "k", Permits: 2},
			func(l backend.Lease) backend.AcquireRequest { return sharedReq("k", l, "W") }},
		{"multi-key behind counted", backend.AcquireRequest{Key: "k", Permits: 2},
			func(l backend.Lease) backend.AcquireRequest {
				r := request("a", l, "W")
				r.Keys = []string{"a", "k"}
				return r
			}},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			d, b, cli := newDroppingBackend(t, prefix)
			hr := request("k", grant(t, b, 30*time.Second), "holder")
			hr.Permits = kind.holder.Permits
			h := acquire(t, b, hr)

			close(d.armed)
			_, err := b.Acquire(testCtx(t, waitBound), kind.req(grant(t, b, 30*time.Second)))
			select {
			case <-d.fired:
			default:
				t.Fatal("the enqueue reply was not intercepted")
			}
			require.ErrorIs(t, err, backend.ErrPermitMismatch)
			assert.Equal(t, []string{prefix + "claims/k/" + h.ID}, keys(t, cli, prefix+"claims/"), "what is left")
			release(t, b, h)
		})
	}
}
