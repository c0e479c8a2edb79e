package memory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// churnLeases is the set of live leases the workers of
// TestNoStaleClaimUnderChurn bind their requests to; the chaos goroutine
// ends them and grants new ones.
type churnLeases struct {
	mu  sync.Mutex
	ids []backend.LeaseID
}

func (s *churnLeases) pick(r *rand.Rand) backend.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[r.IntN(len(s.ids))]
}

// replace swaps the i-th lease for id and returns the one it replaced.
func (s *churnLeases) replace(i int, id backend.LeaseID) backend.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.ids[i]
	s.ids[i] = id
	return old
}

// A claim record is never seen by an owner after the store has let go of
// it: a waiting request (its channel, its stamp call with the mutex
// dropped, its finish or abandon), a lease's end walking its claims, a
// release by name and token, and the keys' queues. Many requests of every
// kind are made, cancelled, stamped, released, expired, revoked and
// deleted at once; each request checks, under the Backend's mutex, before
// every look at its claim, that the record is still its own (its name and
// key) and not on the free list, and a checker walks the store for records
// that have been recycled or have left it. Run with -race.
func TestNoStaleClaimUnderChurn(t *testing.T) {
	b := New()
	defer b.Close()
	ctx := t.Context()
	keys := []string{"a", "b", "c"}

	leases := &churnLeases{}
	for range 3 {
		l, err := b.Grant(ctx, time.Hour)
		require.NoError(t, err)
		leases.ids = append(leases.ids, l.ID)
	}

	// ownedLocked reports whether c is still the record a request made:
	// not recycled, and still naming that request's claim.
	ownedLocked := func(c *claim, id, key string) bool {
		return !slices.Contains(b.free, c) && c.id == id && c.first.key != nil && c.first.key.name == key
	}
	owned := func(c *claim, id, key string) bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return ownedLocked(c, id, key)
	}

	const workers, rounds = 8, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range rounds {
				req := backend.AcquireRequest{
					Key: keys[r.IntN(len(keys))], Lease: leases.pick(r), Owner: fmt.Sprint("w", w),
					Wait: true, Fair: r.IntN(4) != 0, Shared: r.IntN(3) == 0,
				}
				if r.IntN(2) == 0 {
					req.ID = fmt.Sprintf("w%d-%d", w, i)
				}
				if r.IntN(4) == 0 {
					req.Keys, req.Key, req.Shared = []string{"a", "c"}, "a", false
				}
				failStamp := r.IntN(8) == 0
				req.Stamp = func(prev backend.Timestamp) (backend.Timestamp, error) {
					runtime.Gosched() // the mutex is dropped here: let the chaos in
					if failStamp {
						return prev, errors.New("stamp refused")
					}
					return prev, nil
				}
				var held backend.Claim
				c, ready, err := b.admit(&req, &held)
				if err != nil {
					continue // a lease already ended, or a kind the key's queue refuses
				}
				b.mu.Lock()
				id := c.id
				b.mu.Unlock()

				wctx, cancel := context.WithTimeout(ctx, time.Duration(r.IntN(500))*time.Microsecond)
				abandoned := false
				if ready != nil {
					select {
					case <-ready:
					case <-wctx.Done():
						abandoned = true
					}
				}
				cancel()
				if !assert.True(t, owned(c, id, req.Key), "request %s: its claim record was recycled while it still looked at it", id) {
					return
				}
				if abandoned {
					_ = b.abandon(c, context.Canceled)
					continue
				}
				got, err := b.finish(c, req.Stamp)
				if err != nil {
					continue // lost, revoked or refused by its stamp while it waited
				}
				assert.Equal(t, id, got.ID, "finished claim's name")
				assert.Equal(t, req.Key, got.Key, "finished claim's key")
				if r.IntN(5) != 0 {
					assert.NoError(t, b.Release(ctx, got))
				} // else left held until the chaos ends its lease or deletes it
			}
		})
	}

	stop := make(chan struct{})
	chaos := make(chan struct{})
	go func() {
		defer close(chaos)
		r := rand.New(rand.NewPCG(99, 1))
		for {
			select {
			case <-stop:
				return
			default:
			}
			switch r.IntN(4) {
			case 0:
				b.ExpireKey(keys[r.IntN(len(keys))])
			case 1:
				b.DeleteClaim(keys[r.IntN(len(keys))])
			default:
				l, err := b.Grant(ctx, time.Hour)
				if !assert.NoError(t, err) {
					return
				}
				old := leases.replace(r.IntN(3), l.ID)
				if r.IntN(2) == 0 {
					assert.NoError(t, b.Revoke(ctx, old))
				} else {
					b.ExpireLease(old)
				}
			}
			assert.Empty(t, staleInStore(b), "records in the store that are recycled or gone")
			runtime.Gosched()
		}
	}()

	wg.Wait()
	close(stop)
	<-chaos
	for _, id := range leases.ids {
		require.NoError(t, b.Revoke(ctx, id))
	}
	require.Empty(t, staleInStore(b))
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, k := range b.keys {
		require.True(t, k.idle(), "key %q still has entries after every lease ended", name)
	}
}

// staleInStore describes every claim record that the store still links
// (from a key's queue or non-fair list, or a lease) although it is on the
// free list or has left the store.
func staleInStore(b *Backend) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var stale []string
	check := func(where string, c *claim) {
		if slices.Contains(b.free, c) || c.state == stateGone {
			stale = append(stale, fmt.Sprintf("%s: claim %q (token %d, state %d)", where, c.id, c.token, c.state))
		}
	}
	for name, k := range b.keys {
		for e := k.queue.head; e != nil; e = e.next {
			check("queue of "+name, e.c)
		}
		for e := k.unfair.head; e != nil; e = e.next {
			check("non-fair waiters of "+name, e.c)
		}
	}
	for id, l := range b.leases {
		for c := l.claims.head; c != nil; c = c.inLease.next {
			check(fmt.Sprint("lease ", id), c)
		}
	}
	return stale
}
