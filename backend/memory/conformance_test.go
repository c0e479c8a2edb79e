package memory_test

import (
	"testing"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/backendtest"
	"github.com/ash-lock/ashlock/backend/memory"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend { return memory.New() })
}
