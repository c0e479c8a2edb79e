package redisbench_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// runTimeout bounds one run of a benchmark function (one b.N round), so
// that a stuck server fails the benchmark instead of hanging it.
const runTimeout = 10 * time.Minute

// runCtx returns a context for one run of a benchmark function, cancelled
// in b.Cleanup.
func runCtx(b testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	b.Cleanup(cancel)
	return ctx
}

// fsyncEnv names the environment variable that, when set, makes the
// benchmarks run with that appendfsync setting (always, everysec or no)
// instead of the server's own (always): everysec shows what the protocols
// cost when a write does not wait for the disk.
const fsyncEnv = "REDISBENCH_APPENDFSYNC"

var fsyncOnce sync.Once

// setFsync applies fsyncEnv to the server, once per process, and reports
// the setting in force in the benchmark's log.
func setFsync(b *testing.B) {
	b.Helper()
	c := newClient(b, nil)
	ctx := runCtx(b)
	var err error
	fsyncOnce.Do(func() {
		if v := os.Getenv(fsyncEnv); v != "" {
			err = c.ConfigSet(ctx, "appendfsync", v).Err()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := c.ConfigGet(ctx, "appendfsync").Result()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("appendfsync %s", cfg["appendfsync"])
}
