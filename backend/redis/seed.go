package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ash-lock/ashlock/backend"
)

// PrefixParam is the query parameter of a seed that sets the key prefix.
const PrefixParam = "ashlock_prefix"

func init() {
	backend.RegisterSeed("redis", Open)
	backend.RegisterSeed("rediss", Open)
}

// ParseSeed reads a cluster seed: a go-redis URL (redis://, or rediss://
// for TLS; see goredis.ParseURL for user, password, database and options)
// with an optional query parameter ashlock_prefix for the key prefix,
// which is removed before go-redis sees the URL:
//
//	redis://user:secret@host:6379/2?ashlock_prefix=billing:
//
// Without the parameter the prefix is DefaultPrefix. ParseSeed does not
// contact Redis. Errors wrap ErrInvalidConfig.
func ParseSeed(seed string) (*goredis.Options, string, error) {
	u, err := url.Parse(seed)
	if err != nil {
		// url.Parse's error repeats the seed, password and all.
		return nil, "", fmt.Errorf("%w: redis seed: not a URL", backend.ErrInvalidConfig)
	}
	prefix := DefaultPrefix
	q := u.Query()
	if ps, ok := q[PrefixParam]; ok {
		if len(ps) != 1 {
			return nil, "", fmt.Errorf("%w: redis seed: %s given %d times", backend.ErrInvalidConfig, PrefixParam, len(ps))
		}
		prefix = ps[0]
		q.Del(PrefixParam)
		u.RawQuery = q.Encode()
	}
	if err := checkPrefix(prefix); err != nil {
		return nil, "", fmt.Errorf("redis seed: %w", err)
	}
	opts, err := goredis.ParseURL(u.String())
	if err != nil {
		return nil, "", fmt.Errorf("%w: redis seed: %v", backend.ErrInvalidConfig, err)
	}
	return opts, prefix, nil
}

// Open is the backend.SeedOpener of redis:// and rediss:// seeds (see
// ParseSeed): it makes a client and a Backend on it, and returns the
// function that closes both. It blocks like New.
func Open(ctx context.Context, seed string) (backend.Backend, func() error, error) {
	opts, prefix, err := ParseSeed(seed)
	if err != nil {
		return nil, nil, err
	}
	c := goredis.NewClient(opts)
	b, err := New(ctx, c, WithPrefix(prefix))
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return b, func() error { return errors.Join(b.Close(), c.Close()) }, nil
}
