package ashlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// logCapture records everything a client logs, down to debug level, as
// JSON lines in a buffer. The JSON handler serialises its own writes, but
// the test reads the buffer while the client's goroutines may still be
// writing to it, so every access goes through mu.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

// logger returns a logger that writes every record, debug included, to c.
func (c *logCapture) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// logRecord is one decoded record. Numbers stay json.Number so that
// fencing tokens compare exactly.
type logRecord map[string]any

func (r logRecord) level() string { s, _ := r[slog.LevelKey].(string); return s }

func (r logRecord) str(k string) string {
	switch v := r[k].(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// records decodes everything logged so far.
func (c *logCapture) records(t *testing.T) []logRecord {
	t.Helper()
	c.mu.Lock()
	data := bytes.Clone(c.buf.Bytes())
	c.mu.Unlock()
	var out []logRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for dec.More() {
		var r logRecord
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("log output is not JSON lines: %v\n%s", err, data)
		}
		out = append(out, r)
	}
	return out
}

// atLeast returns the records at level min or above.
func (c *logCapture) atLeast(t *testing.T, min slog.Level) []logRecord {
	t.Helper()
	var out []logRecord
	for _, r := range c.records(t) {
		var l slog.Level
		if err := l.UnmarshalText([]byte(r.level())); err != nil {
			t.Fatalf("record with unparseable level %q: %v", r.level(), err)
		}
		if l >= min {
			out = append(out, r)
		}
	}
	return out
}

// capturedClient makes a client on b that logs to a fresh logCapture. It
// must be called inside the synctest bubble the test runs in, so that the
// client's timers run on the bubble's clock.
func capturedClient(t *testing.T, b backend.Backend) (*ashlock.LockClient, *logCapture) {
	t.Helper()
	logs := &logCapture{}
	c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{DefaultTTL: wdTTL, Logger: logs.logger()}, b)
	if err != nil {
		t.Fatalf("ConnectWith: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c, logs
}

// bubbleBackend makes a memory backend inside the current bubble, closed
// after the clients that use it (cleanups run last-registered first).
func bubbleBackend(t *testing.T) *memory.Backend {
	t.Helper()
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// awaitDone waits for g to end, bounded by testTimeout of the bubble's
// fake time, and then for every goroutine of the bubble to settle, so that
// whatever the client logs after closing Done has been written.
func awaitDone(t *testing.T, g *ashlock.Guard) {
	t.Helper()
	select {
	case <-g.Done():
	case <-time.After(testTimeout):
		t.Fatalf("guard on %q still valid after %v", g.Key(), testTimeout)
	}
	synctest.Wait()
}

func TestPoisoningLogsOneWarningPerGuard(t *testing.T) {
	tests := []struct {
		name   string
		keys   []string // acquired in this order, all on one pooled lease
		poison func(t *testing.T, b *memory.Backend, first backend.Claim)
		lost   []string // keys whose guards must be poisoned
	}{
		{
			name:   "claim deleted by an operator",
			keys:   []string{"orders/1", "orders/2"},
			poison: func(t *testing.T, b *memory.Backend, _ backend.Claim) { b.DeleteClaim("orders/1") },
			lost:   []string{"orders/1"},
		},
		{
			name: "lease expired in the store",
			keys: []string{"orders/1", "orders/2"},
			poison: func(t *testing.T, b *memory.Backend, first backend.Claim) {
				if !b.ExpireLease(first.Lease) {
					t.Fatalf("lease %d was not live", first.Lease)
				}
			},
			lost: []string{"orders/1", "orders/2"},
		},
		{
			name:   "renewals failing past the local deadline",
			keys:   []string{"orders/1"},
			poison: func(t *testing.T, b *memory.Backend, _ backend.Claim) { b.FailRenewals(errInjected) },
			lost:   []string{"orders/1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := bubbleBackend(t)
				c, logs := capturedClient(t, b)
				guards := map[string]*ashlock.Guard{}
				tokens := map[string]uint64{}
				for _, k := range tt.keys {
					g, err := c.Lock(k).Acquire(t.Context())
					if err != nil {
						t.Fatalf("Acquire(%q): %v", k, err)
					}
					tok, err := g.FencingToken()
					if err != nil {
						t.Fatal(err)
					}
					guards[k], tokens[k] = g, tok
				}
				first, err := guards[tt.keys[0]].Claim()
				if err != nil {
					t.Fatal(err)
				}
				if n := len(logs.atLeast(t, slog.LevelWarn)); n != 0 {
					t.Fatalf("%d warnings before any fault", n)
				}

				tt.poison(t, b, first)
				for _, k := range tt.lost {
					awaitDone(t, guards[k])
				}

				warned := map[string]int{}
				for _, r := range logs.atLeast(t, slog.LevelWarn) {
					if r.level() != slog.LevelWarn.String() {
						t.Errorf("poisoning logged at %s, want WARN: %v", r.level(), r)
						continue
					}
					k := r.str("key")
					warned[k]++
					if got, want := r.str("token"), strconv.FormatUint(tokens[k], 10); got != want {
						t.Errorf("warning for %q has token %q, want %s", k, got, want)
					}
					if cause := r.str("cause"); strings.Count(cause, ashlock.ErrLeaseExpired.Error()) != 1 {
						t.Errorf("warning for %q has cause %q, want one naming %q once", k, cause, ashlock.ErrLeaseExpired)
					}
				}
				for _, k := range tt.keys {
					want := 0
					for _, l := range tt.lost {
						if l == k {
							want = 1
						}
					}
					if warned[k] != want {
						t.Errorf("%d poisoning warnings for %q, want %d", warned[k], k, want)
					}
				}
				if len(warned) > len(tt.keys) {
					t.Errorf("warnings for keys never held: %v", warned)
				}

				// Unlocking a poisoned guard must not warn a second time.
				for _, k := range tt.lost {
					if err := guards[k].Unlock(context.Background()); !errors.Is(err, ashlock.ErrLeaseExpired) {
						t.Errorf("Unlock(%q) after poisoning = %v, want ErrLeaseExpired", k, err)
					}
				}
				synctest.Wait()
				if n, want := len(logs.atLeast(t, slog.LevelWarn)), len(tt.lost); n != want {
					t.Errorf("%d warnings after unlocking the poisoned guards, want still %d", n, want)
				}
			})
		})
	}
}

// flakyRelease stands for a remote store whose Release fails, as if the
// store were unreachable, while failing is set; every other call goes to a
// memory backend. It embeds the backend.Backend interface, not
// *memory.Backend, so that it does not claim to be a backend.Local: the
// client treats it as a store reached over a network.
type flakyRelease struct {
	backend.Backend
	failing atomic.Bool
	calls   atomic.Int32 // Release calls that failed
}

var errReleaseInjected = errors.New("injected release failure")

func (f *flakyRelease) Release(ctx context.Context, c backend.Claim) error {
	if f.failing.Load() {
		f.calls.Add(1)
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, errReleaseInjected)
	}
	return f.Backend.Release(ctx, c)
}

// checkReleaseWarning asserts that logs hold exactly one warning, about the
// failed release of key with token, carrying an error that mentions want.
func checkReleaseWarning(t *testing.T, logs *logCapture, key string, token uint64, want string) {
	t.Helper()
	warns := logs.atLeast(t, slog.LevelWarn)
	if len(warns) != 1 {
		t.Fatalf("%d warnings after a failed release, want 1: %v", len(warns), warns)
	}
	w := warns[0]
	if w.level() != slog.LevelWarn.String() {
		t.Errorf("failed release logged at %s, want WARN", w.level())
	}
	if got := w.str("key"); got != key {
		t.Errorf("warning key = %q, want %q", got, key)
	}
	if got, want := w.str("token"), strconv.FormatUint(token, 10); got != want {
		t.Errorf("warning token = %q, want %s", got, want)
	}
	if got := w.str("err"); !strings.Contains(got, want) {
		t.Errorf("warning err = %q, want it to carry the backend's error %q", got, want)
	}
}

func TestFailedReleaseLogsWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := &flakyRelease{Backend: bubbleBackend(t)}
		c, logs := capturedClient(t, fb)
		g, err := c.Lock("jobs/nightly").Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		token, err := g.FencingToken()
		if err != nil {
			t.Fatal(err)
		}
		// A second guard keeps the pooled lease in use, so that only the
		// retrier, not the revoke of an idle lease, can free the key.
		other, err := c.Lock("jobs/hourly").Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = other.Unlock(context.Background()) })

		fb.failing.Store(true)
		if err := g.Unlock(t.Context()); !errors.Is(err, ashlock.ErrUnavailable) {
			t.Fatalf("Unlock with the store unreachable = %v, want ErrUnavailable", err)
		}
		checkReleaseWarning(t, logs, "jobs/nightly", token, errReleaseInjected.Error())

		// The background retrier keeps trying while the store is down and
		// frees the key once it is back; retries are not warned about again.
		time.Sleep(time.Second)
		if n := fb.calls.Load(); n < 2 {
			t.Errorf("%d failed release calls after 1s, want the retrier to have tried again", n)
		}
		fb.failing.Store(false)
		time.Sleep(10 * time.Second)
		info, err := c.Inspect(t.Context(), "jobs/nightly")
		if err != nil {
			t.Fatal(err)
		}
		if info.Held {
			t.Errorf("key still held by token %d after the store came back", info.Token)
		}
		if n := len(logs.atLeast(t, slog.LevelWarn)); n != 1 {
			t.Errorf("%d warnings after the retries, want still 1", n)
		}
	})
}

// An in-process store fails a release only once it has been closed under
// the client. Nothing is worth retrying then, but the operator should
// still hear that a claim was not released.
func TestFailedReleaseOnInProcessBackendLogsWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		logs := &logCapture{}
		c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{DefaultTTL: wdTTL, Logger: logs.logger()}, b)
		if err != nil {
			t.Fatal(err)
		}
		// Close can only report that it could not revoke on a closed store.
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		g, err := c.Lock("jobs/nightly").Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		token, err := g.FencingToken()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := g.Unlock(t.Context()); !errors.Is(err, backend.ErrClosed) {
			t.Fatalf("Unlock on a closed store = %v, want ErrClosed", err)
		}
		checkReleaseWarning(t, logs, "jobs/nightly", token, backend.ErrClosed.Error())
	})
}

func TestSuccessfulLockingLogsNothingAtInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBackend(t)
		c, logs := capturedClient(t, b)
		ctx := t.Context()

		// Uncontended cycles, long enough for the watchdog to renew.
		for i := range 3 {
			g, err := c.Lock("k").Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * wdTTL)
			if err := g.Unlock(ctx); err != nil {
				t.Fatalf("Unlock %d: %v", i, err)
			}
		}
		// A waiter handed the key, TryAcquire, and Do.
		g, err := c.Lock("k").Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			w, err := c.Lock("k").Acquire(ctx)
			if err == nil {
				err = w.Unlock(ctx)
			}
			got <- err
		}()
		synctest.Wait() // the waiter is queued
		if err := g.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
		case <-time.After(testTimeout):
			t.Fatal("waiter never got the key")
		}
		tg, err := c.Lock("other").TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tg.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Lock("k").Do(ctx, func(context.Context, uint64) error { return nil }); err != nil {
			t.Fatal(err)
		}
		// An idle lease lingers and is revoked quietly.
		time.Sleep(5 * wdTTL)
		synctest.Wait()

		if recs := logs.atLeast(t, slog.LevelInfo); len(recs) != 0 {
			t.Errorf("successful locking logged %d records at info or above, want none: %v", len(recs), recs)
		}
	})
}
