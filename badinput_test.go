package ashlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
)

func TestBadInputIsRefusedWithSentinel(t *testing.T) {
	tests := []struct {
		name  string
		build func(c *ashlock.LockClient) *ashlock.LockBuilder
		want  []error
	}{
		{"empty key", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("") }, []error{ashlock.ErrInvalidKey}},
		{"invalid UTF-8", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("a\xffb") }, []error{ashlock.ErrInvalidKey}},
		{"NUL byte", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("a\x00b") }, []error{ashlock.ErrInvalidKey}},
		{"newline", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("a\nb") }, []error{ashlock.ErrInvalidKey}},
		{"C1 control", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("a\u0085b") }, []error{ashlock.ErrInvalidKey}},
		{"oversized key", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock(strings.Repeat("k", 1025)) }, []error{ashlock.ErrInvalidKey}},
		{"zero TTL", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").WithTTL(0) }, []error{ashlock.ErrInvalidTTL}},
		{"negative TTL", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").WithTTL(-time.Second) }, []error{ashlock.ErrInvalidTTL}},
		{"interval equal to TTL", func(c *ashlock.LockClient) *ashlock.LockBuilder {
			return c.Lock("k").WithTTL(time.Second).WithWatchdogInterval(time.Second)
		}, []error{ashlock.ErrInvalidConfig}},
		{"interval above TTL", func(c *ashlock.LockClient) *ashlock.LockBuilder {
			return c.Lock("k").WithTTL(time.Second).WithWatchdogInterval(2 * time.Second)
		}, []error{ashlock.ErrInvalidConfig}},
		{"zero interval", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").WithWatchdogInterval(0) }, []error{ashlock.ErrInvalidConfig}},
		{"owner not UTF-8", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").WithOwner("\xff") }, []error{ashlock.ErrInvalidConfig}},
		{"zero permits", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").WithPermits(0) }, []error{ashlock.ErrInvalidConfig}},
		{"negative permits", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").WithPermits(-3) }, []error{ashlock.ErrInvalidConfig}},
		{"1025 permits", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").WithPermits(1025) }, []error{ashlock.ErrInvalidConfig}},
		{"shared with permits", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").Shared().WithPermits(2) }, []error{ashlock.ErrInvalidConfig}},
		{"value over 64 KiB", func(c *ashlock.LockClient) *ashlock.LockBuilder {
			return c.Lock("k").WithValue(make([]byte, 64<<10+1))
		}, []error{ashlock.ErrInvalidConfig}},
		{"LockAll without keys", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.LockAll() }, []error{ashlock.ErrInvalidKey}},
		{"LockAll with a duplicate", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.LockAll("k", "j", "k") }, []error{ashlock.ErrInvalidKey}},
		{"LockAll with an empty key", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.LockAll("k", "") }, []error{ashlock.ErrInvalidKey}},
		{"LockAll of 65 keys", func(c *ashlock.LockClient) *ashlock.LockBuilder {
			keys := []string{"k"}
			for i := range 64 {
				keys = append(keys, fmt.Sprintf("k%d", i))
			}
			return c.LockAll(keys...)
		}, []error{ashlock.ErrInvalidConfig}},
		{"LockAll value over 512 KiB in all", func(c *ashlock.LockClient) *ashlock.LockBuilder {
			keys := make([]string, 64)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
			}
			return c.LockAll(keys...).WithValue(make([]byte, 8<<10+1))
		}, []error{ashlock.ErrInvalidConfig}},
		{"LockAll of 9 keys with a 64 KiB value", func(c *ashlock.LockClient) *ashlock.LockBuilder {
			return c.LockAll("k", "j", "k2", "k3", "k4", "k5", "k6", "k7", "k8").WithValue(make([]byte, 64<<10))
		}, []error{ashlock.ErrInvalidConfig}},
		{"LockAll with permits", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.LockAll("k", "j").WithPermits(2) }, []error{ashlock.ErrInvalidConfig}},
		{"every problem at once", func(c *ashlock.LockClient) *ashlock.LockBuilder {
			return c.Lock("").WithTTL(-1).WithWatchdogInterval(-1)
		}, []error{ashlock.ErrInvalidKey, ashlock.ErrInvalidTTL, ashlock.ErrInvalidConfig}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, ashlock.LockConfig{}, nil)
			ctx := testCtx(t)
			for _, call := range []struct {
				name string
				fn   func() error
			}{
				{"Acquire", func() error { _, err := tt.build(c).Acquire(ctx); return err }},
				{"TryAcquire", func() error { _, err := tt.build(c).TryAcquire(ctx); return err }},
				{"Do", func() error {
					ran := false
					err := tt.build(c).Do(ctx, func(context.Context, uint64) error { ran = true; return nil })
					if ran {
						t.Errorf("Do ran fn despite bad input")
					}
					return err
				}},
			} {
				err := call.fn()
				for _, want := range tt.want {
					if !errors.Is(err, want) {
						t.Errorf("%s: err = %v, want errors.Is %v", call.name, err, want)
					}
				}
			}
			for _, key := range []string{"k", "j"} {
				info, err := c.Inspect(ctx, key)
				if err != nil || info.Held || len(info.Waiters) != 0 {
					t.Errorf("after refused calls Inspect(%s) = %+v, %v; want free", key, info, err)
				}
			}
		})
	}
}

// TestBadPermitsReportTheNumberGiven: the sentinel rows above check only
// errors.Is; this checks that a refused WithPermits names the number the
// caller passed, not a clamped or sentinel stand-in for it.
func TestBadPermitsReportTheNumberGiven(t *testing.T) {
	tests := []struct {
		name  string
		build func(c *ashlock.LockClient) *ashlock.LockBuilder
		want  string
	}{
		{"zero permits", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").WithPermits(0) }, "0 permits, not in 1..1024"},
		{"negative permits", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").WithPermits(-3) }, "-3 permits, not in 1..1024"},
		{"1025 permits", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").WithPermits(1025) }, "1025 permits, not in 1..1024"},
		{"LockAll with negative permits", func(c *ashlock.LockClient) *ashlock.LockBuilder {
			return c.LockAll("k", "j").WithPermits(-3)
		}, "-3 permits, not in 1..1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, ashlock.LockConfig{}, nil)
			_, err := tt.build(c).TryAcquire(testCtx(t))
			require.ErrorIs(t, err, ashlock.ErrInvalidConfig)
			assert.Contains(t, err.Error(), ": "+tt.want)
		})
	}
}

func TestBadConfigIsRefused(t *testing.T) {
	tests := []struct {
		name string
		cfg  ashlock.LockConfig
		want error
	}{
		{"negative DefaultTTL", ashlock.LockConfig{DefaultTTL: -time.Second}, ashlock.ErrInvalidTTL},
		{"negative interval", ashlock.LockConfig{WatchdogInterval: -time.Second}, ashlock.ErrInvalidConfig},
		{"interval not below DefaultTTL", ashlock.LockConfig{DefaultTTL: time.Second, WatchdogInterval: time.Second}, ashlock.ErrInvalidConfig},
		{"interval not below the 30s default", ashlock.LockConfig{WatchdogInterval: 30 * time.Second}, ashlock.ErrInvalidConfig},
		{"unknown scheme", ashlock.LockConfig{ClusterSeed: "redis://localhost:6379"}, ashlock.ErrInvalidConfig},
		{"no scheme", ashlock.LockConfig{ClusterSeed: "localhost:2379"}, ashlock.ErrInvalidConfig},
		{"etcd without hosts", ashlock.LockConfig{ClusterSeed: "etcd:///prefix/"}, ashlock.ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ashlock.Connect(testCtx(t), tt.cfg)
			if !errors.Is(err, tt.want) || c != nil {
				t.Fatalf("Connect = %v, %v; want nil, %v", c, err, tt.want)
			}
		})
	}
}

func TestGuardMisuseAfterUnlockAndClose(t *testing.T) {
	ctx := testCtx(t)
	c, err := ashlock.Connect(ctx, ashlock.LockConfig{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Lock("k").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Unlock(ctx); err != nil {
		t.Fatalf("first Unlock: %v", err)
	}
	if err := g.Unlock(ctx); err != nil {
		t.Errorf("second Unlock = %v, want nil (idempotent)", err)
	}
	if tok, err := g.FencingToken(); !errors.Is(err, ashlock.ErrUnlocked) || tok != 0 {
		t.Errorf("FencingToken after Unlock = %d, %v; want 0, ErrUnlocked", tok, err)
	}
	if !errors.Is(g.Err(), ashlock.ErrUnlocked) {
		t.Errorf("Err after Unlock = %v, want ErrUnlocked", g.Err())
	}

	held, err := c.Lock("held").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !errors.Is(held.Err(), ashlock.ErrUnlocked) {
		t.Errorf("guard held across Close: Err = %v, want ErrUnlocked", held.Err())
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	for name, call := range map[string]func() error{
		"Acquire":    func() error { _, err := c.Lock("k").Acquire(ctx); return err },
		"TryAcquire": func() error { _, err := c.Lock("k").TryAcquire(ctx); return err },
		"Do": func() error {
			return c.Lock("k").Do(ctx, func(context.Context, uint64) error { return nil })
		},
		"Inspect": func() error { _, err := c.Inspect(ctx, "k"); return err },
	} {
		if err := call(); !errors.Is(err, ashlock.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if err := held.Unlock(ctx); err != nil {
		t.Errorf("Unlock of a guard Close released = %v, want nil", err)
	}
}
