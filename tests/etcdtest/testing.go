package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// StartTimeout bounds how long Start and StartCluster wait for members to
// become ready, and RestartMemberT for a restarted one.
const StartTimeout = 30 * time.Second

// Start starts a one-member cluster for the test, with data in a directory
// under t.TempDir, and stops it in t.Cleanup. It fails the test if the
// member is not ready within StartTimeout.
func Start(t testing.TB) *Cluster {
	t.Helper()
	return StartCluster(t, 1)
}

// StartCluster starts an n-member cluster for the test, as Start does.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c, err := Launch(ctx, Options{Members: n, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("etcdtest: start %d-member cluster: %v", n, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Client returns a client of every member, closed in t.Cleanup; see
// NewClient for configure.
func (c *Cluster) Client(t testing.TB, configure ...func(*clientv3.Config)) *clientv3.Client {
	t.Helper()
	cli, err := c.NewClient(configure...)
	if err != nil {
		t.Fatalf("etcdtest: new client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// RestartMemberT restarts stopped member i, failing the test if it is not
// ready within StartTimeout.
func (c *Cluster) RestartMemberT(t testing.TB, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := c.RestartMember(ctx, i); err != nil {
		t.Fatal(err)
	}
}
