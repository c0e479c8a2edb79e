package ashlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
	"github.com/ash-lock/ashlock/backend/memory"
)

// openSeed creates the backend a ClusterSeed names, and the function that
// closes it (and anything opened for it).
func openSeed(ctx context.Context, seed string) (backend.Backend, func() error, error) {
	switch {
	case seed == "" || seed == "memory://":
		b := memory.New()
		return b, b.Close, nil
	case strings.HasPrefix(seed, "etcd://"):
		return openEtcd(ctx, seed)
	}
	if open, ok := backend.LookupSeed(seed); ok {
		return open(ctx, seed)
	}
	return nil, nil, fmt.Errorf("%w: ClusterSeed %q: want \"memory://\", \"etcd://host:port[,host:port]/prefix/\", "+
		"or a scheme whose package is imported (postgres:// with backend/postgres, redis:// with backend/redis)", ErrInvalidConfig, seed)
}

// openEtcd connects to the endpoints of an "etcd://" seed and checks that
// the cluster answers before returning, so that Connect fails fast (with
// ErrUnavailable) rather than on the first Acquire. For TLS or auth, build
// the clientv3.Client yourself and use etcd.New with ConnectWith.
func openEtcd(ctx context.Context, seed string) (backend.Backend, func() error, error) {
	endpoints, prefix, err := etcd.ParseSeed(seed)
	if err != nil {
		return nil, nil, errors.Join(ErrInvalidConfig, err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints,
		Logger:    zap.NewNop(),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// A linearizable read of one key under the prefix proves a quorum is
	// reachable with the permissions the backend needs.
	if _, err := cli.Get(ctx, prefix, clientv3.WithCountOnly()); err != nil {
		_ = cli.Close()
		return nil, nil, withCtx(ctx, fmt.Errorf("%w: etcd at %v: %w", ErrUnavailable, endpoints, err))
	}
	b, err := etcd.New(cli, etcd.WithPrefix(prefix))
	if err != nil {
		_ = cli.Close()
		return nil, nil, errors.Join(ErrInvalidConfig, err)
	}
	closeAll := func() error {
		return errors.Join(b.Close(), cli.Close())
	}
	return b, closeAll, nil
}
