package chaos

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/etcd"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// quickTimeout bounds the single-member tests below.
const quickTimeout = 30 * time.Second

// TestLeasedKeysFindsHeldClaims shows that the "nothing left behind" check
// of every run can fail: it sees a held claim and stops seeing it once the
// lock is released.
func TestLeasedKeysFindsHeldClaims(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), quickTimeout)
	defer cancel()
	cli := etcdtest.Start(t).Client(t, nil)
	const prefix = "leftover/"
	lk, err := newLibLocker(ctx, &etcdConn{cli: cli}, prefix, lockKey, "probe", ttl, true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := lk.close(ctx); err != nil {
			t.Error(err)
		}
	}()
	hd, err := lk.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := leasedKeys(ctx, cli, prefix); err != nil || len(keys) != 1 {
		t.Fatalf("while held: leasedKeys = %q, %v; want the one claim", keys, err)
	}
	if err := hd.release(ctx); err != nil {
		t.Fatal(err)
	}
	if keys, err := leasedKeys(ctx, cli, prefix); err != nil || len(keys) != 0 {
		t.Fatalf("after release: leasedKeys = %q, %v; want none", keys, err)
	}
}

// TestBadInputOnEtcd feeds bad keys, TTLs, options, seeds and prefixes to
// a client on the etcd backend. Each must be refused with its sentinel
// before anything is written; the errors are logged, because RELIABILITY.md
// quotes them.
func TestBadInputOnEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), quickTimeout)
	defer cancel()
	cli := etcdtest.Start(t).Client(t, nil)
	const prefix = "badinput/"
	be, err := etcd.New(cli, etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: ttl, Logger: slog.New(slog.DiscardHandler)}, be)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := errors.Join(c.Close(ctx), be.Close()); err != nil {
			t.Error(err)
		}
	}()

	acquire := func(b *ashlock.LockBuilder) func() error {
		return func() error {
			g, err := b.Acquire(ctx)
			if g != nil {
				t.Errorf("got a guard despite bad input")
			}
			return err
		}
	}
	connect := func(cfg ashlock.LockConfig) func() error {
		return func() error {
			c, err := ashlock.Connect(ctx, cfg)
			if c != nil {
				t.Errorf("Connect returned a client despite bad input")
				_ = c.Close(ctx)
			}
			return err
		}
	}
	newBackend := func(p string) func() error {
		return func() error {
			b, err := etcd.New(cli, etcd.WithPrefix(p))
			if b != nil {
				t.Errorf("etcd.New returned a backend despite bad input")
				_ = b.Close()
			}
			return err
		}
	}
	tests := []struct {
		name string
		call func() error
		want []error
	}{
		{"empty key", acquire(c.Lock("")), []error{ashlock.ErrInvalidKey}},
		{"key not UTF-8", acquire(c.Lock("a\xffb")), []error{ashlock.ErrInvalidKey}},
		{"key with NUL", acquire(c.Lock("a\x00b")), []error{ashlock.ErrInvalidKey}},
		{"key with newline", acquire(c.Lock("orders\n42")), []error{ashlock.ErrInvalidKey}},
		{"key with DEL", acquire(c.Lock("a\x7fb")), []error{ashlock.ErrInvalidKey}},
		{"key with C1 control", acquire(c.Lock("a\u0085b")), []error{ashlock.ErrInvalidKey}},
		{"key of 1025 bytes", acquire(c.Lock(strings.Repeat("k", 1025))), []error{ashlock.ErrInvalidKey}},
		{"zero TTL", acquire(c.Lock("k").WithTTL(0)), []error{ashlock.ErrInvalidTTL}},
		{"negative TTL", acquire(c.Lock("k").WithTTL(-time.Second)), []error{ashlock.ErrInvalidTTL}},
		{"interval equal to TTL", acquire(c.Lock("k").WithTTL(2 * time.Second).WithWatchdogInterval(2 * time.Second)), []error{ashlock.ErrInvalidConfig}},
		{"interval above TTL", acquire(c.Lock("k").WithTTL(2 * time.Second).WithWatchdogInterval(3 * time.Second)), []error{ashlock.ErrInvalidConfig}},
		{"zero interval", acquire(c.Lock("k").WithWatchdogInterval(0)), []error{ashlock.ErrInvalidConfig}},
		{"owner not UTF-8", acquire(c.Lock("k").WithOwner("\xff")), []error{ashlock.ErrInvalidConfig}},
		{"owner of 257 bytes", acquire(c.Lock("k").WithOwner(strings.Repeat("o", 257))), []error{ashlock.ErrInvalidConfig}},
		{"everything at once", acquire(c.Lock("").WithTTL(-1).WithWatchdogInterval(-1)), []error{ashlock.ErrInvalidKey, ashlock.ErrInvalidTTL, ashlock.ErrInvalidConfig}},
		{"TryAcquire with a bad key", func() error { _, err := c.Lock("a\x00").TryAcquire(ctx); return err }, []error{ashlock.ErrInvalidKey}},
		{"Do with a bad key", func() error {
			return c.Lock("").Do(ctx, func(context.Context, uint64) error {
				t.Error("Do ran fn despite a bad key")
				return nil
			})
		}, []error{ashlock.ErrInvalidKey}},
		{"Inspect with a bad key", func() error { _, err := c.Inspect(ctx, "a\nb"); return err }, []error{ashlock.ErrInvalidKey}},
		{"negative DefaultTTL", connect(ashlock.LockConfig{DefaultTTL: -time.Second}), []error{ashlock.ErrInvalidTTL}},
		{"negative WatchdogInterval", connect(ashlock.LockConfig{WatchdogInterval: -time.Second}), []error{ashlock.ErrInvalidConfig}},
		{"WatchdogInterval not below DefaultTTL", connect(ashlock.LockConfig{DefaultTTL: time.Second, WatchdogInterval: time.Second}), []error{ashlock.ErrInvalidConfig}},
		{"seed with an unregistered scheme", connect(ashlock.LockConfig{ClusterSeed: "zk://127.0.0.1:2181"}), []error{ashlock.ErrInvalidConfig}},
		{"seed without a scheme", connect(ashlock.LockConfig{ClusterSeed: "127.0.0.1:2379"}), []error{ashlock.ErrInvalidConfig}},
		{"seed without hosts", connect(ashlock.LockConfig{ClusterSeed: "etcd:///app/"}), []error{ashlock.ErrInvalidConfig, etcd.ErrBadSeed}},
		{"seed with an empty host", connect(ashlock.LockConfig{ClusterSeed: "etcd://127.0.0.1:2379,,127.0.0.2:2379/"}), []error{ashlock.ErrInvalidConfig, etcd.ErrBadSeed}},
		{"seed with port 0", connect(ashlock.LockConfig{ClusterSeed: "etcd://127.0.0.1:0/"}), []error{ashlock.ErrInvalidConfig, etcd.ErrBadSeed}},
		{"seed with port 65536", connect(ashlock.LockConfig{ClusterSeed: "etcd://127.0.0.1:65536/"}), []error{ashlock.ErrInvalidConfig, etcd.ErrBadSeed}},
		{"seed with an unbracketed IPv6 host", connect(ashlock.LockConfig{ClusterSeed: "etcd://::1/"}), []error{ashlock.ErrInvalidConfig, etcd.ErrBadSeed}},
		{"seed with a query", connect(ashlock.LockConfig{ClusterSeed: "etcd://127.0.0.1:2379/app/?tls=1"}), []error{ashlock.ErrInvalidConfig, etcd.ErrBadSeed}},
		{"seed with a control character in the prefix", connect(ashlock.LockConfig{ClusterSeed: "etcd://127.0.0.1:2379/a\x01b/"}), []error{ashlock.ErrInvalidConfig, etcd.ErrBadSeed, etcd.ErrBadPrefix}},
		{"seed with a 300-byte prefix", connect(ashlock.LockConfig{ClusterSeed: "etcd://127.0.0.1:2379/" + strings.Repeat("p", 300) + "/"}), []error{ashlock.ErrInvalidConfig, etcd.ErrBadSeed, etcd.ErrBadPrefix}},
		{"empty prefix", newBackend(""), []error{etcd.ErrBadPrefix}},
		{"prefix without a trailing slash", newBackend("app"), []error{etcd.ErrBadPrefix}},
		{"prefix not UTF-8", newBackend("\xff/"), []error{etcd.ErrBadPrefix}},
		{"prefix with a control character", newBackend("a\tb/"), []error{etcd.ErrBadPrefix}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range tt.want {
				if !errors.Is(err, want) {
					t.Errorf("error %q does not match %v", err, want)
				}
			}
			t.Logf("%s: %v", tt.name, err)
		})
	}
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("after the refused calls the prefix holds %v keys (err %v); want none", resp, err)
	}
}
