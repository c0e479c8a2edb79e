package redisbench_test

import (
	"testing"

	"github.com/ash-lock/ashlock/tests/redistest"
)

// srv is the redis-server every benchmark of the run talks to, started
// with keyspace notifications on.
var srv *redistest.Server

func TestMain(m *testing.M) { redistest.Main(m, &srv) }
