package client_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
)

// acquireAndDrop takes key and lets the Guard go without Unlock, returning
// a channel taken from its Done while it was held.
func acquireAndDrop(t *testing.T, c *ashlock.LockClient, key string) <-chan struct{} {
	t.Helper()
	g, err := c.Lock(key).Acquire(testCtx(t))
	require.NoError(t, err)
	return g.Done()
}

// A Guard dropped without Unlock is released once the collector finds it:
// its claim leaves etcd and the key is free for the next holder.
func TestDroppedGuardIsReleased(t *testing.T) {
	prefix := uniquePrefix(t)
	c := connect(t, shared, prefix, ashlock.LockConfig{})
	other := connect(t, shared, prefix, ashlock.LockConfig{})

	done := acquireAndDrop(t, c, "dropped")
	deadline := time.Now().Add(waitBound)
	for {
		info, err := other.Inspect(testCtx(t), "dropped")
		require.NoError(t, err)
		if !info.Held {
			break
		}
		require.False(t, time.Now().After(deadline), "key of a dropped guard still held after %v of forced collections", waitBound)
		runtime.GC()
		runtime.Gosched()
	}
	select {
	case <-done:
	default:
		t.Error("the dropped guard's Done channel is still open after its release")
	}

	g, err := other.Lock("dropped").TryAcquire(testCtx(t))
	require.NoError(t, err, "TryAcquire after the dropped guard's release")
	require.NoError(t, g.Unlock(testCtx(t)))
}
