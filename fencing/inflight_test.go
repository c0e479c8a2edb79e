package fencing_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/fencing"
)

// An Admit in progress is seen by everyone at once or not at all: once a
// stale Admit has been refused because of a newer exclusive token T, a
// shared request below T, started afterwards, is refused too, even while
// the Admit of T has not returned. One goroutine admits ever higher even
// tokens; the others present token 1 (always refused, reporting the
// highest token T) and then T-1 as a reader, which must be refused, since
// nobody but the writer moves the marks. Run it with -race, which widens
// the window between an Admit's two stores.
func TestFenceAdmitInProgressIsAtomic(t *testing.T) {
	var (
		f    fencing.Fence
		stop atomic.Bool
		bad  atomic.Uint64 // a T-1 admitted after token 1 was refused for T
		wg   sync.WaitGroup
	)
	require.NoError(t, f.Admit("r", 2))
	wg.Go(func() {
		for token := uint64(4); !stop.Load(); token += 2 {
			if err := f.Admit("r", token); err != nil {
				t.Errorf("the only writer refused: %v", err)
				return
			}
		}
	})
	for range 3 {
		wg.Go(func() {
			for !stop.Load() {
				var stale *fencing.StaleTokenError
				if !errors.As(f.Admit("r", 1), &stale) {
					t.Error("token 1 admitted")
					return
				}
				if f.AdmitShared("r", stale.Highest-1) == nil {
					bad.Store(stale.Highest)
				}
			}
		})
	}
	time.Sleep(time.Second) // the length of the run, not a synchronisation
	stop.Store(true)
	wg.Wait()
	require.Zero(t, bad.Load(), "a reader below an exclusive token that had already refused an older one")
}
