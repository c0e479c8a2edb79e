package etcdbackend_test

import (
	"context"
	"fmt"
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

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(etcdtest.WithShared{M: m, Shared: &shared}, etcdtest.IgnoredGoroutines()...)
}

var prefixSeq atomic.Int64

// uniquePrefix returns a prefix no other test uses, readable in etcd dumps.
func uniquePrefix(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	return fmt.Sprintf("t%d-%s/", prefixSeq.Add(1), name)
}

// newBackend returns a backend on its own client of c under prefix, both
// closed in t.Cleanup (the backend first).
func newBackend(t testing.TB, c *etcdtest.Cluster, prefix string, configure ...func(*clientv3.Config)) (*etcd.Backend, *clientv3.Client) {
	t.Helper()
	return newBackendWith(t, c, prefix, nil, configure...)
}

// newBackendWith is newBackend with Backend options besides the prefix.
func newBackendWith(t testing.TB, c *etcdtest.Cluster, prefix string, opts []etcd.Option, configure ...func(*clientv3.Config)) (*etcd.Backend, *clientv3.Client) {
	t.Helper()
	cli := c.Client(t, configure...)
	b, err := etcd.New(cli, append([]etcd.Option{etcd.WithPrefix(prefix)}, opts...)...)
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
