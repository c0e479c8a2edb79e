package redisbench_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ash-lock/ashlock"
	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// leaseTTL is the ashlock clients' lease TTL: long enough that no lease
// is renewed during a measured stretch, so that the request counts are
// the locking's alone (renewals follow the clock, not the work).
const leaseTTL = 5 * time.Minute

// quiet takes the warnings of the ashlock clients and Backends: the loss
// benchmark poisons guards on purpose.
var quiet = slog.New(slog.DiscardHandler)

// counter is a go-redis hook counting every command a client sends
// (each command of a pipeline counts as one). With record set it also
// keeps a copy of each command's arguments.
type counter struct {
	n atomic.Int64

	mu     sync.Mutex
	record bool
	cmds   [][]any
}

func (c *counter) requests() int64 { return c.n.Load() }

func (c *counter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *counter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.n.Add(1)
		c.keep(cmd)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		for _, cmd := range cmds {
			c.keep(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *counter) keep(cmd goredis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.record {
		c.cmds = append(c.cmds, append([]any(nil), cmd.Args()...))
	}
}

// recording starts (on) or stops recording and returns what was recorded
// since the last start.
func (c *counter) recording(on bool) [][]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.cmds
	c.record, c.cmds = on, nil
	return got
}

// newClient returns a go-redis client of the benchmark server, counted by
// ctr when it is non-nil, closed in b.Cleanup.
func newClient(b testing.TB, ctr *counter) *goredis.Client {
	b.Helper()
	c := srv.Client()
	if ctr != nil {
		c.AddHook(ctr)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// newBackend returns a Backend under prefix on rc, closed in b.Cleanup
// (after the clients made on it, which are closed before it).
func newBackend(b testing.TB, rc goredis.UniversalClient, prefix string) *redisb.Backend {
	b.Helper()
	be, err := redisb.New(runCtx(b), rc, redisb.WithPrefix(prefix), redisb.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	return be
}

// newAshlock returns an ashlock client on a Backend of its own under
// prefix over rc; both are closed in b.Cleanup.
func newAshlock(b testing.TB, rc goredis.UniversalClient, prefix string) *ashlock.LockClient {
	b.Helper()
	return connect(b, newBackend(b, rc, prefix))
}

// connect returns an ashlock client on be, closed in b.Cleanup.
func connect(b testing.TB, be *redisb.Backend) *ashlock.LockClient {
	b.Helper()
	c, err := ashlock.ConnectWith(runCtx(b), ashlock.LockConfig{DefaultTTL: leaseTTL, Logger: quiet}, be)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// newPrefix returns a key prefix of its own for one benchmark's clients.
func newPrefix(what string) string {
	return fmt.Sprintf("%s%s:", redistest.Prefix(), what)
}
