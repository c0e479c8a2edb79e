// Package metrics_test checks ashlock's OpenTelemetry metrics through the
// SDK, the way an application sees them: a manual reader collects what a
// client recorded on the memory backend (under testing/synctest, so that
// durations and renewal margins are exact) and on an embedded etcd.
package metrics_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ash-lock/ashlock/tests/etcdtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, etcdtest.IgnoredGoroutines()...)
}
