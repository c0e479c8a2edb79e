// Package redisbackend tests backend/redis against a real redis-server
// that the tests start themselves (see tests/redistest).
package redisbackend

import (
	"testing"

	"github.com/ash-lock/ashlock/tests/redistest"
)

var srv *redistest.Server

func TestMain(m *testing.M) { redistest.Main(m, &srv) }
