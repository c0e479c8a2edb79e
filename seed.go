package ashlock

import (
	"context"
	"fmt"
	"strings"

	"github.com/ash-lock/ashlock/backend"
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
