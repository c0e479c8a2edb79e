package redisbackend

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// On a Redis Cluster, a prefix with a glob character is escaped in the
// pattern of the lease notifications, so the pattern's hash tag is not
// the prefix's: the subscription must still be made on the node that owns
// the prefix's slot, where its leases' notifications are published. Each
// prefix here is one whose escaped tag hashes to another node.
func TestGlobPrefixOnACluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := redistest.StartCluster(ctx, 3)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cl.Close()) })
	c := cl.Client()
	t.Cleanup(func() { _ = c.Close() })
	node := func(s string) int {
		slot, err := c.ClusterKeySlot(ctx, s).Result()
		require.NoError(t, err)
		return int(slot) * len(cl.Nodes) / 16384
	}

	base := redistest.Prefix()
	for _, glob := range []string{"*", "?", "[a]", `\`} {
		prefix := ""
		for i := 0; prefix == ""; i++ {
			p := fmt.Sprintf("%s%d%s", base, i, glob)
			if node("{"+p+"}") != node("__keyspace@0__:{"+globEscape(p)+"}lease:*") {
				prefix = p
			}
		}
		t.Run(fmt.Sprintf("prefix %q", prefix), func(t *testing.T) {
			bc := cl.Client()
			t.Cleanup(func() { _ = bc.Close() })
			b, err := redisb.New(ctx, bc, redisb.WithPrefix(prefix))
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close() })
			lost := make(chan error, 1)
			req := request("k", grant(t, b, time.Minute), "H")
			req.OnLost = backend.LossFunc(func(err error) { lost <- err })
			_, err = b.Acquire(ctx, req)
			require.NoError(t, err)
			require.NoError(t, c.Del(ctx, leaseKey(prefix, req.Lease)).Err())
			select {
			case err := <-lost:
				require.ErrorIs(t, err, backend.ErrLeaseExpired)
			case <-time.After(5 * time.Second):
				t.Fatal("the holder was not told of its lease's deletion within 5 s")
			}
		})
	}
}
