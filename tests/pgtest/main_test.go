package pgtest

import (
	"testing"

	"go.uber.org/goleak"
)

var shared *Server

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(WithShared{M: m, Shared: &shared})
}
