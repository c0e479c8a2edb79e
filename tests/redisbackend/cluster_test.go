package redisbackend

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/backendtest"
	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// On a Redis Cluster of three masters, through go-redis's cluster client:
// every key of a Backend shares one hash tag, so its scripts, multi-key
// ones included, run on the one node that owns that slot, and its
// subscription is on that node, where its leases' keyspace notifications
// are published, whatever characters the prefix holds.
func TestOnACluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := redistest.StartCluster(ctx, 3)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cl.Close()) })
	onCluster := func(t *testing.T, prefix string) *redisb.Backend {
		c := cl.Client()
		t.Cleanup(func() { _ = c.Close() })
		b, err := redisb.New(t.Context(), c, redisb.WithPrefix(prefix))
		require.NoError(t, err)
		return b
	}

	t.Run("conformance", func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T) backend.Backend { return onCluster(t, redistest.Prefix()) })
	})

	// A prefix on each node: the keyspace notification of a deleted lease
	// is published only by the node that owns the lease's slot.
	c := cl.Client()
	t.Cleanup(func() { _ = c.Close() })
	onNode := map[int]string{}
	for len(onNode) < len(cl.Nodes) {
		prefix := redistest.Prefix()
		slot, err := c.ClusterKeySlot(ctx, "{"+prefix+"}").Result()
		require.NoError(t, err)
		onNode[int(slot)*len(cl.Nodes)/16384] = prefix
	}
	for node, prefix := range onNode {
		t.Run(fmt.Sprintf("a deleted lease poisons its holder, node %d", node), func(t *testing.T) {
			deletedLeasePoisons(ctx, t, onCluster(t, prefix), c, prefix)
		})
	}

	// A prefix with a glob character is escaped in the pattern of the
	// lease notifications, so the pattern's hash tag is not the prefix's:
	// the subscription must still be made on the node that owns the
	// prefix's slot. Each prefix here is one whose escaped tag hashes to
	// another node.
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
		t.Run(fmt.Sprintf("a deleted lease poisons its holder, prefix %q", prefix), func(t *testing.T) {
			deletedLeasePoisons(ctx, t, onCluster(t, prefix), c, prefix)
		})
	}
}

// deletedLeasePoisons checks that b's holder is told at once when its
// lease's key is deleted through c.
func deletedLeasePoisons(ctx context.Context, t *testing.T, b *redisb.Backend, c goredis.UniversalClient, prefix string) {
	t.Helper()
	t.Cleanup(func() { _ = b.Close() })
	lost := make(chan error, 1)
	req := request("k", grant(t, b, time.Minute), "H")
	req.OnLost = backend.LossFunc(func(err error) { lost <- err })
	_, err := b.Acquire(ctx, req)
	require.NoError(t, err)
	require.NoError(t, c.Del(ctx, leaseKey(prefix, req.Lease)).Err())
	select {
	case err := <-lost:
		require.ErrorIs(t, err, backend.ErrLeaseExpired)
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told of its lease's deletion within 5 s")
	}
}
