package etcdbackend_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/ash-lock/ashlock/backend/etcd"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// shared is the server most tests use; each test keeps to its own prefix.
var shared *etcdtest.Cluster

// withServer runs the tests between starting and stopping the shared
// server, so that goleak.VerifyTestMain checks for leaks with the server
// already gone.
type withServer struct{ m *testing.M }

func (w withServer) Run() int {
	ctx, cancel := context.WithTimeout(context.Background(), etcdtest.StartTimeout)
	c, err := etcdtest.Launch(ctx, etcdtest.Options{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	shared = c
	defer c.Close()
	return w.m.Run()
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(withServer{m}, etcdtest.IgnoredGoroutines()...)
}

var prefixSeq atomic.Int64

// uniquePrefix returns a prefix no other test uses, readable in etcd dumps.
func uniquePrefix(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	return fmt.Sprintf("t%d-%s/", prefixSeq.Add(1), name)
}

// newBackend returns a backend on its own client of c under prefix, both
// closed in t.Cleanup (the backend first).
func newBackend(t testing.TB, c *etcdtest.Cluster, prefix string) (*etcd.Backend, *clientv3.Client) {
	t.Helper()
	cli := c.Client(t)
	b, err := etcd.New(cli, etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, cli
}

// testCtx returns a context that ends after d or with the test.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
