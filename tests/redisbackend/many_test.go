package redisbackend

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
)

// Ten thousand locks held through one client share one lease and a fixed
// number of connections; deleting that lease poisons every guard at once
// and reaps every claim.
func TestTenThousandLocksOnOneLease(t *testing.T) {
	const locks, workers = 10_000, 16
	// Ten thousand acquisitions under the race detector take seconds, and
	// many more on a machine shared with other test runs.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	b, rc, prefix := newBackend(t)
	c, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: time.Minute}, b)
	require.NoError(t, err)
	defer c.Close(ctx)

	guards := make([]*ashlock.Guard, locks)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < locks; i += workers {
				g, err := c.Lock(fmt.Sprintf("many/%d", i)).Acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				guards[i] = g
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	leases := keysUnderGlob(t, rc, prefix, "lease:*")
	assert.Len(t, leases, 1, "the guards do not share one lease")
	stats := rc.PoolStats()
	// The pool's bound, not the number of locks, caps the connections.
	assert.LessOrEqual(t, int(stats.TotalConns), rc.Options().PoolSize, "connections grew with the number of locks")
	clients, err := rc.ClientList(ctx).Result()
	require.NoError(t, err)
	t.Logf("%d locks held; the backend's client has %d connections; the server has %d clients",
		locks, stats.TotalConns, len(splitLines(clients)))

	at := time.Now()
	require.NoError(t, rc.Del(ctx, leases[0]).Err())
	for i, g := range guards {
		select {
		case <-g.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("guard %d still valid 10s after its lease was deleted", i)
		}
	}
	t.Logf("all %d guards poisoned %v after the DEL", locks, time.Since(at))
	deadline := time.Now().Add(10 * time.Second)
	for len(keysUnderGlob(t, rc, prefix, "q:*")) > 0 {
		require.True(t, time.Now().Before(deadline), "claims of the deleted lease were not reaped")
		time.Sleep(20 * time.Millisecond)
	}
	onlyCounters(t, rc, prefix)
}
