package metrics_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// slowHandOver is a store whose next successful Acquire takes the claim at
// once but hands it back only at a set instant, like a reply delayed on
// the network. It embeds the interface, so the client treats it as remote.
type slowHandOver struct {
	backend.Backend
	until atomic.Pointer[time.Time]
}

func (s *slowHandOver) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Claim, error) {
	c, err := s.Backend.Acquire(ctx, req)
	if u := s.until.Swap(nil); u != nil && err == nil {
		time.Sleep(time.Until(*u))
	}
	return c, err
}

// A lease can run out at the very instant the store hands a claim on it
// back. Whichever of the watchdog and Acquire sees it first, the guard must
// be counted in ashlock.held exactly as long as the caller holds it: not
// at all if Acquire gives up on that claim, once if it retries and
// succeeds. The two goroutines wake at the same fake instant, so the test
// repeats the race to meet every interleaving.
func TestHeldNeverDriftsWhenLeaseRunsOutDuringHandOver(t *testing.T) {
	const rounds = 300
	var drifts []string // reported outside the bubbles: a failed bubble ends the test
	for i := range rounds {
		synctest.Test(t, func(t *testing.T) {
			m := newMeter(t)
			b := bubbleBackend(t)
			slow := &slowHandOver{Backend: b}
			c := bubbleClient(t, slow, m)
			b.FailRenewals(errInjected) // the first lease runs out at grant + TTL - margin
			at := time.Now().Add(ttl - margin)
			slow.until.Store(&at)

			g, err := c.Lock("k").Acquire(t.Context())
			synctest.Wait()
			want := int64(0)
			if err == nil && g.Err() == nil {
				want = 1 // a retry on a fresh lease succeeded
			}
			if got := m.collect(t).sum(t, held, noAttrs); got != want {
				drifts = append(drifts, fmt.Sprintf("round %d: %s = %d, want %d (Acquire: %v)", i, held, got, want, err))
			}
		})
	}
	for _, d := range drifts[:min(len(drifts), 3)] {
		t.Error(d)
	}
	if len(drifts) > 0 {
		t.Errorf("%s drifted in %d of %d rounds", held, len(drifts), rounds)
	}
}
