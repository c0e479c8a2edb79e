package pgbackend_test

import (
	"testing"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/backendtest"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, _ := newBackend(t, uniqueSchema(t))
		return b
	})
}
