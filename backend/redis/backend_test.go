package redis

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// A Ring is a UniversalClient too, but it moves a key to another shard
// when its own is down, and a lock's state would not follow: New refuses
// it with a clear error, and does not reach a Ring's Subscribe, which
// panics without a channel.
func TestNewRefusesARing(t *testing.T) {
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer func() { _ = ring.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var b *Backend
	var err error
	require.NotPanics(t, func() { b, err = New(ctx, ring, WithLogger(quiet)) })
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Nil(t, b)
}
