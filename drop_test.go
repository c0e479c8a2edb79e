package ashlock_test

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
)

// recorder is a slog.Handler that keeps every record it is given.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// The client adds no attributes or groups of its own to its logger.
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// dropWarnings returns the attributes of every WARN record about a dropped
// guard.
func (r *recorder) dropWarnings() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, rec := range r.recs {
		if rec.Level != slog.LevelWarn || rec.Message != "ashlock: guard dropped without Unlock; releasing" {
			continue
		}
		attrs := map[string]any{}
		rec.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.Any()
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// collectUntil runs the garbage collector until cond holds, failing the
// test if it does not within testTimeout. Cleanups run on a goroutine of
// the runtime's after the collection that found their object, hence the
// loop.
func collectUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		require.Falsef(t, time.Now().After(deadline), "%s: not within %v of forced collections", what, testTimeout)
		runtime.GC()
		runtime.Gosched()
	}
}

// acquireAndDrop takes key and lets the Guard go without Unlock. It
// returns the guard's token and a channel taken from Done while it was
// held.
func acquireAndDrop(t *testing.T, c *ashlock.LockClient, key string) (uint64, <-chan struct{}) {
	t.Helper()
	g, err := c.Lock(key).Acquire(testCtx(t))
	require.NoError(t, err)
	token, err := g.FencingToken()
	require.NoError(t, err)
	return token, g.Done()
}

// keyFree reports whether Inspect sees key unheld.
func keyFree(t *testing.T, c *ashlock.LockClient, key string) func() bool {
	return func() bool {
		info, err := c.Inspect(testCtx(t), key)
		require.NoError(t, err)
		return !info.Held
	}
}

func TestDroppedGuardIsReleasedWithAWarning(t *testing.T) {
	logs := &recorder{}
	c := newClient(t, ashlock.LockConfig{Logger: slog.New(logs)}, nil)

	token, _ := acquireAndDrop(t, c, "dropped")
	collectUntil(t, "key of a dropped guard freed", keyFree(t, c, "dropped"))

	warnings := logs.dropWarnings()
	require.Len(t, warnings, 1)
	assert.Equal(t, "dropped", warnings[0]["key"])
	assert.Equal(t, token, warnings[0]["token"])

	g, err := c.Lock("dropped").TryAcquire(testCtx(t))
	require.NoError(t, err, "TryAcquire after the dropped guard's release")
	next, err := g.FencingToken()
	require.NoError(t, err)
	assert.Greater(t, next, token)
	require.NoError(t, g.Unlock(testCtx(t)))
}

func TestDoneOfADroppedGuardCloses(t *testing.T) {
	c := newClient(t, ashlock.LockConfig{}, nil)
	_, done := acquireAndDrop(t, c, "dropped")
	collectUntil(t, "Done of a dropped guard closed", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
}

// After Unlock the cleanup does nothing, even when the key has a new
// holder by the time the unlocked Guard is collected.
func TestCollectingAnUnlockedGuardReleasesNothing(t *testing.T) {
	logs := &recorder{}
	c := newClient(t, ashlock.LockConfig{Logger: slog.New(logs)}, nil)
	ctx := testCtx(t)

	unlock := func() {
		g, err := c.Lock("k").Acquire(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Unlock(ctx))
	}
	unlock()
	holder, err := c.Lock("k").Acquire(ctx)
	require.NoError(t, err)

	// A witness dropped at the same time as the unlocked guard: once its
	// release is seen, the collector has found both.
	acquireAndDrop(t, c, "witness")
	collectUntil(t, "witness released", keyFree(t, c, "witness"))

	assert.NoError(t, holder.Err())
	info, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Held, "the new holder's claim is still there")
	assert.Len(t, logs.dropWarnings(), 1, "only the witness was released by its cleanup")
	require.NoError(t, holder.Unlock(ctx))
}
