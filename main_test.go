package ashlock_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet discards the warnings that poisoning tests provoke on purpose.
var quiet = slog.New(slog.DiscardHandler)

// testTimeout bounds every wait in these tests.
const testTimeout = 10 * time.Second

// testCtx returns a context that ends with the test or after testTimeout.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newClient returns a client on b (a fresh memory backend if nil), closed
// when the test ends.
func newClient(t *testing.T, cfg ashlock.LockConfig, b *memory.Backend) *ashlock.LockClient {
	t.Helper()
	if b == nil {
		b = memory.New()
		t.Cleanup(func() { _ = b.Close() })
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	c, err := ashlock.ConnectWith(context.Background(), cfg, b)
	if err != nil {
		t.Fatalf("ConnectWith: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// waitDone fails the test unless g's Done channel closes within testTimeout.
func waitDone(t *testing.T, g *ashlock.Guard) {
	t.Helper()
	select {
	case <-g.Done():
	case <-time.After(testTimeout):
		t.Fatalf("guard on %q still valid after %v", g.Key(), testTimeout)
	}
}
