package etcdtest

import (
	"context"
	"fmt"
	"os"
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

// WithShared wraps a test binary's M: Run starts a one-member cluster,
// stores it in *Shared for the package's tests, runs them, and closes the
// cluster before returning. Pass it to goleak.VerifyTestMain so that the
// leak check runs with the server already gone:
//
//	var shared *etcdtest.Cluster
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(etcdtest.WithShared{M: m, Shared: &shared}, etcdtest.IgnoredGoroutines()...)
//	}
type WithShared struct {
	M      *testing.M
	Shared **Cluster
}

// Run implements goleak's TestingM. It returns 1 without running any test
// if the cluster does not start within StartTimeout.
func (w WithShared) Run() int {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	c, err := Launch(ctx, Options{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*w.Shared = c
	defer c.Close()
	return w.M.Run()
}
