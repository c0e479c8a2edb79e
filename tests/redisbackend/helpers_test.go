package redisbackend

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// notificationsOff turns the server's keyspace notifications off until the
// test ends, and returns a client of the test's.
func notificationsOff(t *testing.T) *goredis.Client {
	t.Helper()
	ctx := ctxFor(t)
	rc := client(t)
	old, err := rc.ConfigGet(ctx, "notify-keyspace-events").Result()
	require.NoError(t, err)
	require.NoError(t, rc.ConfigSet(ctx, "notify-keyspace-events", "").Err())
	t.Cleanup(func() {
		// The test's context has ended by now.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c := srv.Client()
		defer c.Close()
		require.NoError(t, c.ConfigSet(ctx, "notify-keyspace-events", old["notify-keyspace-events"]).Err())
	})
	return rc
}

// quietLogger drops what a Backend logs (the WARN about notifications
// being off, say).
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// ctxFor returns a context for one test's calls, bounded by a timeout.
func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// client returns a client of the shared server, closed at the test's end.
func client(t *testing.T) *goredis.Client {
	t.Helper()
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newBackend returns a Backend with a prefix of its own on a client of its
// own; both are closed at the test's end. It returns the prefix too.
func newBackend(t *testing.T, opts ...redisb.Option) (*redisb.Backend, *goredis.Client, string) {
	t.Helper()
	c := client(t)
	prefix := redistest.Prefix()
	b, err := redisb.New(ctxFor(t), c, append([]redisb.Option{redisb.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b, c, prefix
}

// leaseKey is the Redis key of lease id under prefix (the layout DESIGN
// fixes: an operator DELs it to revoke the lease).
func leaseKey(prefix string, id backend.LeaseID) string {
	return "{" + prefix + "}lease:" + strconv.FormatInt(int64(id), 10)
}

// keysUnder lists the Redis keys of prefix, sorted.
func keysUnder(t *testing.T, c *goredis.Client, prefix string) []string {
	t.Helper()
	keys, err := c.Keys(ctxFor(t), globEscape("{"+prefix+"}")+"*").Result()
	require.NoError(t, err)
	slices.Sort(keys)
	return keys
}

// onlyCounters asserts that prefix has no key left but its token and
// lease counters and the leases in live.
func onlyCounters(t *testing.T, c *goredis.Client, prefix string, live ...backend.LeaseID) {
	t.Helper()
	want := []string{"{" + prefix + "}leases", "{" + prefix + "}token"}
	for _, l := range live {
		want = append(want, leaseKey(prefix, l))
	}
	slices.Sort(want)
	assert.Equal(t, want, keysUnder(t, c, prefix), "keys left under the prefix")
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// request is a fair, waiting request.
func request(key string, l backend.Lease, owner string) backend.AcquireRequest {
	return backend.AcquireRequest{Key: key, ID: uuid.NewString(), Lease: l.ID, Owner: owner, Wait: true, Fair: true}
}

// grant grants a lease of ttl, revoked at the test's end.
func grant(t *testing.T, b backend.Backend, ttl time.Duration) backend.Lease {
	t.Helper()
	l, err := b.Grant(ctxFor(t), ttl)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Revoke(ctx, l.ID)
	})
	return l
}

// awaitWaiting polls Inspect until key has n waiters (a request reaching
// the queue is not announced anywhere else).
func awaitWaiting(t *testing.T, b backend.Backend, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := b.Inspect(ctxFor(t), key)
		require.NoError(t, err)
		if len(info.Waiters) == n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%q has %d waiters, want %d", key, len(info.Waiters), n)
		time.Sleep(5 * time.Millisecond)
	}
}

// pending is an Acquire running in the background.
type pending struct {
	done  chan struct{}
	claim backend.Claim
	err   error
}

// startAcquire runs b.Acquire(r) on a goroutine of its own with the test's
// context.
func startAcquire(t *testing.T, b backend.Backend, r backend.AcquireRequest) *pending {
	return startAcquireCtx(ctxFor(t), b, r)
}

func startAcquireCtx(ctx context.Context, b backend.Backend, r backend.AcquireRequest) *pending {
	p := &pending{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.claim, p.err = b.Acquire(ctx, r)
	}()
	return p
}

// await waits for the Acquire to succeed.
func (p *pending) await(t *testing.T) backend.Claim {
	t.Helper()
	select {
	case <-p.done:
		require.NoError(t, p.err)
		return p.claim
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return within 10s")
		return backend.Claim{}
	}
}

// awaitErr waits for the Acquire to fail and returns its error.
func (p *pending) awaitErr(t *testing.T) error {
	t.Helper()
	select {
	case <-p.done:
		require.Error(t, p.err)
		return p.err
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return within 10s")
		return nil
	}
}

// keysUnderGlob lists the keys of prefix whose rest matches glob.
func keysUnderGlob(t *testing.T, c *goredis.Client, prefix, glob string) []string {
	t.Helper()
	keys, err := c.Keys(ctxFor(t), globEscape("{"+prefix+"}")+glob).Result()
	require.NoError(t, err)
	return keys
}

func splitLines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }

// newBackendPrefix is newBackend with a prefix given.
// backendVia makes a Backend of prefix whose go-redis client dials addr (a
// proxy's). Both are closed when the test ends, before anything the test
// registered for its end earlier, such as the proxy.
func backendVia(ctx context.Context, t *testing.T, addr, prefix string, opts ...redisb.Option) *redisb.Backend {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	b, err := redisb.New(ctx, c, append([]redisb.Option{redisb.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// hookedBackend returns a Backend on prefix whose client runs hooks,
// added in the order given; both are closed at the test's end.
func hookedBackend(ctx context.Context, t *testing.T, prefix string, hooks ...goredis.Hook) *redisb.Backend {
	t.Helper()
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	for _, h := range hooks {
		c.AddHook(h)
	}
	b, err := redisb.New(ctx, c, redisb.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// processOnly is the part of a test's go-redis hook that lets dials and
// pipelines pass: the hooks here look at single commands.
type processOnly struct{}

func (processOnly) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (processOnly) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func newBackendPrefix(t *testing.T, prefix string) (*redisb.Backend, *goredis.Client, string) {
	t.Helper()
	c := client(t)
	b, err := redisb.New(ctxFor(t), c, redisb.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b, c, prefix
}

// ownServer starts a server for one test (one whose settings, a memory
// limit say, would disturb the others) and returns a client of it; both
// are closed at the test's end.
func ownServer(t *testing.T) *goredis.Client {
	t.Helper()
	s, err := redistest.Start(ctxFor(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	rc := s.Client()
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// startHeardWaiter makes a Backend on wc (under prefix, with opts) and
// starts req on it, on a lease of its own that it returns, queued behind
// holder on hb; it returns once the waiter has checked holder after its
// subscription was confirmed (a command naming holder's token), so that
// a release of holder from then on is heard, not found by a check or a
// read.
func startHeardWaiter(t *testing.T, wc *goredis.Client, prefix string, hb backend.Backend, holder backend.Claim,
	req backend.AcquireRequest, opts ...redisb.Option) (*redisb.Backend, backend.Lease, *pending) {
	t.Helper()
	checked := &afterArg{arg: strconv.FormatUint(holder.Token, 10), done: make(chan struct{})}
	wc.AddHook(checked)
	wb, err := redisb.New(ctxFor(t), wc, append([]redisb.Option{redisb.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = wb.Close() })
	l := grant(t, wb, time.Minute)
	req.Lease = l.ID
	p := startAcquire(t, wb, req)
	awaitWaiting(t, hb, req.Key, 1)
	select {
	case <-checked.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never checked the holder after subscribing")
	}
	return wb, l, p
}

// queueBehind acquires key on hb with the request mk makes, then queues n
// waiters behind it, each on a Backend of its own under prefix, and
// returns the holder's claim and the waiters' Acquires in queue order.
func queueBehind(t *testing.T, hb backend.Backend, prefix, key string, n int,
	mk func(key string, l backend.Lease, owner string) backend.AcquireRequest) (backend.Claim, []*pending) {
	t.Helper()
	holder, err := hb.Acquire(ctxFor(t), mk(key, grant(t, hb, time.Minute), "H"))
	require.NoError(t, err)
	ps := make([]*pending, n)
	for i := range ps {
		wb, _, _ := newBackendPrefix(t, prefix)
		ps[i] = startAcquire(t, wb, mk(key, grant(t, wb, time.Minute), fmt.Sprint("W", i)))
		awaitWaiting(t, hb, key, i+1)
	}
	return holder, ps
}
