package etcdbackend_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// Concurrent Observes of one Backend, several on the same key, cost one
// range watch each on the Backend's one watch stream, which the claims'
// own watches share: the client opens no other watch stream. Each
// observer still sees every change of its key.
func TestObservesShareOneWatchStream(t *testing.T) {
	const n, keys = 20, 4
	prefix := uniquePrefix(t)
	var wc watchCounter
	var wl watchLog
	b, _ := newBackend(t, shared, prefix, wc.configure, wl.configure)
	ctx, cancel := context.WithCancel(context.Background())
	obs := make([]*observer, n)
	for i := range obs {
		obs[i] = startObserver(ctx, b, fmt.Sprintf("k%d", i%keys))
	}
	defer func() {
		cancel()
		for _, o := range obs {
			<-o.done
		}
	}()
	for _, o := range obs {
		o.expect(t, waitBound, "free")
	}

	l := grant(t, b, 30*time.Second)
	since := wl.next()
	claims := make([]backend.Claim, keys)
	for k := range claims {
		claims[k] = acquire(t, b, valued(request(fmt.Sprintf("k%d", k), l, "H"), "v"))
	}
	for i, o := range obs {
		o.expect(t, waitBound, held(claims[i%keys], "v"))
	}
	// Held until the claims' loss watches have started, on the same
	// stream.
	for _, c := range claims {
		wl.awaitKeyWatches(t, "a claim's loss watch", since, b.ClaimKey(c), 1)
	}
	for _, c := range claims {
		require.NoError(t, b.Release(testCtx(t, waitBound), c))
	}
	for _, o := range obs {
		o.expect(t, waitBound, "free")
	}

	require.Equal(t, int64(1), wc.streams.Load(), "watch streams opened by the Backend's client")
	require.Equal(t, int64(n), wc.ranged.Load(), "range watches created: one per Observe")
	require.Equal(t, int64(keys), wc.single.Load(), "single-key watches created: one per held claim")
}
