package redisbackend

import (
	"testing"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/backendtest"
	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
	"github.com/stretchr/testify/require"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		c := srv.Client()
		t.Cleanup(func() { _ = c.Close() })
		b, err := redisb.New(t.Context(), c, redisb.WithPrefix(redistest.Prefix()))
		require.NoError(t, err)
		return b
	})
}
