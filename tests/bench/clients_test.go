package bench_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/etcd"
)

// callTimeout bounds every single etcd call or lock operation a benchmark
// makes, so that a stuck server fails the benchmark instead of hanging it.
const callTimeout = 30 * time.Second

// quiet discards ashlock's logs: a benchmark is not the place for them.
var quiet = slog.New(slog.DiscardHandler)

var prefixSeq atomic.Int64

// newPrefix returns an etcd key prefix that no other benchmark run uses, so
// that runs never see each other's keys or watch events.
func newPrefix(what string) string {
	return fmt.Sprintf("bench/%d-%s/", prefixSeq.Add(1), what)
}

// newEtcd returns a client of the benchmark's etcd member, closed in
// b.Cleanup. With ctr non-nil every request it makes is counted.
func newEtcd(b testing.TB, ctr *rpcCounter) *clientv3.Client {
	b.Helper()
	cfg := clientv3.Config{
		Endpoints:   server.endpoints(b),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	if ctr != nil {
		cfg.DialOptions = ctr.dialOptions()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cli.Close() })
	return cli
}

// newAshlock returns an ashlock client on its own etcd backend over cli,
// under prefix. Both are closed in b.Cleanup, before cli.
func newAshlock(b testing.TB, cli *clientv3.Client, prefix string, opts ...etcd.Option) (*ashlock.LockClient, *etcd.Backend) {
	b.Helper()
	be, err := etcd.New(cli, append([]etcd.Option{etcd.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	c, err := ashlock.ConnectWith(context.Background(), ashlock.LockConfig{Logger: quiet}, be)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c, be
}

// newSession returns an etcd concurrency.Session on cli with a lease of ttl
// seconds (0: the package's default of 60s), closed in b.Cleanup.
func newSession(b testing.TB, cli *clientv3.Client, ttl int) *concurrency.Session {
	b.Helper()
	opts := []concurrency.SessionOption{}
	if ttl > 0 {
		opts = append(opts, concurrency.WithTTL(ttl))
	}
	s, err := concurrency.NewSession(cli, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// callCtx returns a context bounded by callTimeout.
func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}

// compact compacts etcd's history up to now and waits until the compaction
// has reached the backend, so that each benchmark starts on a store whose
// size does not depend on what ran before it. (Ranges over a key prefix
// visit deleted keys until they are compacted; see BENCHMARKS.md.)
func compact(b testing.TB, cli *clientv3.Client) {
	b.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	resp, err := cli.Get(ctx, "bench/compact", clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	_, err = cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical())
	if err != nil && !errors.Is(err, rpctypes.ErrCompacted) { // nothing written since the last compaction
		b.Fatal(err)
	}
}

// keysUnder counts the keys under prefix.
func keysUnder(b testing.TB, cli *clientv3.Client, prefix string) int64 {
	b.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	return resp.Count
}

// contenderClients makes n etcd clients, one per contender, whose
// requests ctr counts (nil: none), the first of which has compacted the
// member's history so that each run starts without the last one's dead
// keys.
func contenderClients(b testing.TB, ctr *rpcCounter, n int) []*clientv3.Client {
	clis := make([]*clientv3.Client, n)
	for i := range clis {
		clis[i] = newEtcd(b, ctr)
	}
	if n > 0 {
		compact(b, clis[0])
	}
	return clis
}
