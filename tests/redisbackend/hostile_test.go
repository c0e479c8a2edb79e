package redisbackend

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// hostileKeys are valid lock keys that would break a script that spliced
// them into its text, a key name that did not keep them apart, or a glob.
var hostileKeys = []string{
	`"); redis.call('FLUSHALL') --`,
	`]] redis.call('FLUSHALL') --[[`,
	`' .. redis.call('FLUSHALL') .. '`,
	`\`, `%d`, `%s %s`, `*`, `?`, `[a-z]`, `{`, `}`, `{x}`, `}{`,
	"q:x", "c:x", "lease:1", "leases", "token", "events", "e:1", "k:x", "x:o", "x:v",
	"a", "a/", "a/b", "a b", "über", "😀", strings.Repeat("k", backend.MaxKeyLen),
}

// Hostile keys are locked, inspected and released like any other, each in
// a queue of its own, and nothing outside the Backend's hash tag changes.
func TestHostileKeys(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	canary := redistest.Prefix() + "canary"
	require.NoError(t, rc.Set(ctx, canary, "alive", 0).Err())
	l := grant(t, b, time.Minute)

	held := map[string]backend.Claim{}
	for i, k := range hostileKeys {
		r := request(k, l, owner(i))
		r.Value = []byte("value of " + k)
		c, err := b.Acquire(ctx, r)
		require.NoError(t, err, "key %q", k)
		held[k] = c
	}
	for i, k := range hostileKeys {
		info, err := b.Inspect(ctx, k)
		require.NoError(t, err)
		require.Len(t, info.Holders, 1, "key %q", k)
		assert.Equal(t, owner(i), info.Owner)
		assert.Equal(t, held[k].Token, info.Token)
		assert.Equal(t, []byte("value of "+k), info.Holders[0].Value)
		_, err = b.Acquire(ctx, try(request(k, l, "rival")))
		assert.ErrorIs(t, err, backend.ErrLocked, "key %q", k)
	}
	multiKeys := []string{"{", "}", "}{"}
	_, err := b.Acquire(ctx, try(multi(request("{", l, "multi"), multiKeys...)))
	assert.ErrorIs(t, err, backend.ErrLocked)
	for _, c := range held {
		require.NoError(t, b.Release(ctx, c))
	}
	c, err := b.Acquire(ctx, multi(request("{", l, "multi"), multiKeys...))
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, c))

	got, err := rc.Get(ctx, canary).Result()
	require.NoError(t, err)
	assert.Equal(t, "alive", got)
	onlyCounters(t, rc, prefix, l.ID)
}

// Prefixes with glob and Lua characters keep their locks apart, and their
// lease notifications too; a prefix with a brace is refused.
func TestHostilePrefixes(t *testing.T) {
	ctx := ctxFor(t)
	base := redistest.Prefix()
	prefixes := []string{base + "*", base + "?", base + "[a]", base + `\`, base + "'..'", base}
	var bs []*redisb.Backend
	for _, p := range prefixes {
		b, err := redisb.New(ctx, client(t), redisb.WithPrefix(p))
		require.NoError(t, err, "prefix %q", p)
		t.Cleanup(func() { _ = b.Close() })
		bs = append(bs, b)
	}
	// Each backend holds the same key: distinct prefixes never share a queue.
	type holding struct {
		lease backend.Lease
		lost  chan struct{}
	}
	var hs []holding
	for i, b := range bs {
		l := grant(t, b, time.Minute)
		lost := make(chan struct{})
		var once sync.Once
		r := request("same", l, prefixes[i])
		r.OnLost = backend.LossFunc(func(error) { once.Do(func() { close(lost) }) })
		_, err := b.Acquire(ctx, r)
		require.NoError(t, err, "prefix %q", prefixes[i])
		hs = append(hs, holding{l, lost})
	}
	// Deleting the first prefix's lease reaches its holder only, although
	// the others' lease keys match it as a glob.
	rc := client(t)
	require.NoError(t, rc.Del(ctx, leaseKey(prefixes[0], hs[0].lease.ID)).Err())
	select {
	case <-hs[0].lost:
	case <-time.After(5 * time.Second):
		t.Fatal("the holder of the deleted lease was not told")
	}
	for i, h := range hs[1:] {
		select {
		case <-h.lost:
			t.Errorf("holder under prefix %q lost its claim to another prefix's lease", prefixes[i+1])
		case <-time.After(50 * time.Millisecond):
		}
	}

	for _, p := range []string{"a{b", "a}b", "{", ""} {
		_, err := redisb.New(ctx, client(t), redisb.WithPrefix(p))
		assert.ErrorIs(t, err, backend.ErrInvalidConfig, "prefix %q", p)
	}
}

// With keyspace notifications off, New warns how to turn them on, and a
// deleted lease is found at the next renewal.
func TestNotificationsOffWarns(t *testing.T) {
	ctx := ctxFor(t)
	rc := notificationsOff(t)

	var logs safeBuffer
	b, _, prefix := newBackend(t, redisb.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	assert.Contains(t, logs.String(), "level=WARN")
	assert.Contains(t, logs.String(), "CONFIG SET notify-keyspace-events Kgx")

	l := grant(t, b, time.Minute)
	_, err := b.Acquire(ctx, request("quiet", l, "Q"))
	require.NoError(t, err)
	require.NoError(t, rc.Del(ctx, leaseKey(prefix, l.ID)).Err())
	_, err = b.KeepAlive(ctx, l.ID)
	assert.ErrorIs(t, err, backend.ErrLeaseExpired)
}

// safeBuffer is a bytes.Buffer safe for concurrent use.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func owner(i int) string { return "owner " + strconv.Itoa(i) + ` "'\{}` }

func try(r backend.AcquireRequest) backend.AcquireRequest { r.Wait = false; return r }
