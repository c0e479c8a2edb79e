// Package client_test runs the public ashlock API against a real embedded
// etcd: what a service sees, end to end, rather than the backend alone.
package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// shared is the etcd most tests use; each test keeps to its own prefix.
var shared *etcdtest.Cluster

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(etcdtest.WithShared{M: m, Shared: &shared}, etcdtest.IgnoredGoroutines()...)
}

const waitBound = 10 * time.Second

var quiet = slog.New(slog.DiscardHandler)

var prefixSeq atomic.Int64

// uniquePrefix returns an etcd prefix no other test uses.
func uniquePrefix(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	return fmt.Sprintf("c%d-%s/", prefixSeq.Add(1), name)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	t.Cleanup(cancel)
	return ctx
}

// seed returns the ClusterSeed for c's endpoints under prefix.
func seed(c *etcdtest.Cluster, prefix string) string {
	return "etcd://" + strings.Join(c.Endpoints(), ",") + "/" + prefix
}

// connect returns a client made by Connect from an etcd:// seed, closed in
// t.Cleanup.
func connect(t testing.TB, c *etcdtest.Cluster, prefix string, cfg ashlock.LockConfig) *ashlock.LockClient {
	t.Helper()
	cfg.ClusterSeed = seed(c, prefix)
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	lc, err := ashlock.Connect(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("Connect(%s): %v", cfg.ClusterSeed, err)
	}
	t.Cleanup(func() {
		if err := lc.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return lc
}
