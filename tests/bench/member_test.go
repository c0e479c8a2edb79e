package bench_test

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// startMember starts the one-member etcd the benchmarks use, with data in a
// fresh temporary directory (returned, for the caller to remove), and waits
// until it serves.
//
// It is configured like etcdtest's members (no-op logger, default raft
// timing, no fsync) but started here rather than with etcdtest.Launch,
// because etcdtest puts a TCP forwarder in front of each member (so that
// tests can cut clients off), and that extra hop would be measured too.
func startMember() (*embed.Etcd, string, error) {
	dir, err := os.MkdirTemp("", "ashlock-bench-etcd-")
	if err != nil {
		return nil, "", err
	}
	client, err := freeURL()
	if err != nil {
		return nil, dir, err
	}
	peer, err := freeURL()
	if err != nil {
		return nil, dir, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = "bench=" + peer.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.EnableGRPCGateway = false
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, dir, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, dir, nil
	case err := <-e.Err():
		e.Close()
		return nil, dir, fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(etcdtest.StartTimeout):
		e.Close()
		return nil, dir, fmt.Errorf("etcd not ready within %v", etcdtest.StartTimeout)
	}
}

// freeURL returns http://127.0.0.1:PORT for a port that was free a moment
// ago. Another process could take it before etcd listens; StartEtcd then
// fails and the benchmark reports it.
func freeURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return url.URL{}, err
	}
	return url.URL{Scheme: "http", Host: addr}, nil
}
