package fencing_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/fencing"
)

// TestFenceConcurrent has many goroutines admit tokens for a few shared
// resources. Tokens come from a per-resource counter, sometimes held back
// a little so that stale tokens are common. It checks that:
//   - a token is never admitted when a higher one had already been admitted
//     (by an Admit that returned before this one started);
//   - every refusal reports a mark above the refused token that some
//     goroutine actually presented;
//   - each resource's final mark is the largest token presented for it.
//
// Run it with -race.
func TestFenceConcurrent(t *testing.T) {
	const (
		goroutines = 16
		perG       = 10000
		resources  = 3
	)
	var (
		f       fencing.Fence
		issued  [resources]atomic.Uint64 // last token handed out per resource
		settled [resources]atomic.Uint64 // highest token whose Admit has returned nil
		maxSent [goroutines][resources]uint64
		wg      sync.WaitGroup
	)
	name := func(r int) string { return "res/" + strconv.Itoa(r) }

	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				r := (g + i) % resources
				floor := settled[r].Load()
				token := issued[r].Add(1)
				// Hold back every other token by up to two (depending on
				// the goroutine) so that a higher one often gets in first.
				if i%2 == 0 && token > 2 {
					token -= uint64(g % 3)
				}
				maxSent[g][r] = max(maxSent[g][r], token)

				err := f.Admit(name(r), token)
				if err != nil {
					se, ok := err.(*fencing.StaleTokenError)
					switch {
					case !ok:
						t.Errorf("Admit(%s, %d) = %v, want *StaleTokenError", name(r), token, err)
						return
					case se.Highest <= token || se.Highest > issued[r].Load():
						t.Errorf("refusal of %d reports mark %d, want above the token and at most %d",
							token, se.Highest, issued[r].Load())
						return
					}
					continue
				}
				if token < floor {
					t.Errorf("Admit(%s, %d) succeeded after %d had been admitted", name(r), token, floor)
					return
				}
				raise(&settled[r], token)
			}
		})
	}
	waitTimeout(t, &wg, 60*time.Second)

	for r := range resources {
		var want uint64
		for g := range goroutines {
			want = max(want, maxSent[g][r])
		}
		if got := f.Highest(name(r)); got != want {
			t.Errorf("final Highest(%s) = %d, want the largest token presented, %d", name(r), got, want)
		}
		if got := settled[r].Load(); got != want {
			t.Errorf("largest admitted token for %s = %d, want %d", name(r), got, want)
		}
	}
}

// raise sets v to at least x.
func raise(v *atomic.Uint64, x uint64) {
	for {
		cur := v.Load()
		if x <= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// waitTimeout waits for wg, failing the test if it takes longer than d.
func waitTimeout(t *testing.T, wg *sync.WaitGroup, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("goroutines still running after %v", d)
	}
}
