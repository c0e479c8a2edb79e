package hlc

import (
	"sync"
	"testing"
	"time"
)

// TestClockConcurrent hammers one Clock from several goroutines, mixing
// Now with Update of stamps from a second Clock, and checks that every
// goroutine sees strictly increasing stamps, that no stamp is issued
// twice, and that the clock ends above everything it issued or merged.
// Run it with -race.
func TestClockConcurrent(t *testing.T) {
	const (
		goroutines = 8
		perG       = 2000
	)
	c := New(nil, 0)
	peer := New(nil, 0)

	stamps := make([][]Timestamp, goroutines)
	merged := make([][]Timestamp, goroutines)
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			var prev Timestamp
			for i := range perG {
				if i%4 == 3 {
					remote := peer.Now()
					if err := c.Update(remote); err != nil {
						errs <- err
						return
					}
					merged[g] = append(merged[g], remote)
					continue
				}
				s := c.Now()
				if !prev.Less(s) {
					t.Errorf("goroutine %d: stamp %v after %v", g, s, prev)
					return
				}
				prev = s
				stamps[g] = append(stamps[g], s)
			}
		})
	}
	waitTimeout(t, &wg, 30*time.Second)
	close(errs)
	for err := range errs {
		t.Errorf("Update: %v", err)
	}

	seen := make(map[Timestamp]int, goroutines*perG)
	var highest Timestamp
	for g := range goroutines {
		for _, s := range stamps[g] {
			if other, dup := seen[s]; dup {
				t.Fatalf("stamp %v issued to goroutines %d and %d", s, other, g)
			}
			seen[s] = g
			if highest.Less(s) {
				highest = s
			}
		}
		for _, s := range merged[g] {
			if highest.Less(s) {
				highest = s
			}
		}
	}
	if final := c.Now(); !highest.Less(final) {
		t.Errorf("final stamp %v is not above highest issued or merged %v", final, highest)
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
