package etcdtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// AwaitLeader returns once the members agree on a leader that qualifies:
// with the leader cut off, one of the other two, after their election; and
// it gives up with an error when ctx ends first.
func TestAwaitLeader(t *testing.T) {
	c := StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cut, err := c.AwaitLeader(ctx, func(int) bool { return true })
	require.NoError(t, err)
	require.NoError(t, c.Partition(cut))
	l, err := c.AwaitLeader(ctx, func(i int) bool { return i != cut })
	require.NoError(t, err)
	require.NotEqual(t, cut, l)
	require.Equal(t, l, c.Leader())
	c.Heal()
	// A linearizable read through the member that was cut: it is back in
	// the cluster before Close stops the members.
	cli := c.Client(t, func(cfg *clientv3.Config) { cfg.Endpoints = c.Endpoints()[cut : cut+1] })
	_, err = cli.Get(ctx, "k")
	require.NoError(t, err)

	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = c.AwaitLeader(short, func(int) bool { return false })
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
