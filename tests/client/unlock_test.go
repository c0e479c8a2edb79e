package client_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
)

// Unlock with a context that has already ended still releases the key: the
// release runs on a bounded context of its own, as a deferred Unlock after
// a request's deadline needs.
func TestUnlockWithEndedContextReleases(t *testing.T) {
	prefix := uniquePrefix(t)
	c := connect(t, shared, prefix, ashlock.LockConfig{})
	g, err := c.Lock("k").Acquire(testCtx(t))
	require.NoError(t, err)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, g.Unlock(ended))
	info, err := c.Inspect(testCtx(t), "k")
	require.NoError(t, err)
	require.False(t, info.Held, "the key after Unlock with an ended context: %+v", info)
	require.Zero(t, keysUnder(t, shared.Client(t, nil), prefix), "claims left under the prefix")
}
