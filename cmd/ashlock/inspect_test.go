//go:build unix

package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ash-lock/ashlock"
)

// queueWaiters queues one waiting acquisition of key per owner, in order,
// each taking its place behind the previous one; cleanup cancels them
// and waits for them to end.
func queueWaiters(t *testing.T, f *fixture, key string, owners ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	c := f.connect(t)
	for i, owner := range owners {
		wg.Go(func() {
			g, err := c.Lock(key).WithOwner(owner).Acquire(ctx)
			if err == nil {
				g.Unlock(context.Background())
			}
		})
		// One at a time, so that the queue order is the owners' order.
		waitForWaiters(t, f, key, i+1)
	}
}

func TestInspectShowsHolderAndWaitersInOrder(t *testing.T) {
	f := newFixture(t)
	g := f.hold("job")
	holderToken, err := g.FencingToken()
	if err != nil {
		t.Fatal(err)
	}
	queueWaiters(t, f, "job", "first", "second")
	info := f.inspect("job")

	t.Run("text", func(t *testing.T) {
		f.stdout = newNotifyBuffer()
		f.env.stdout = f.stdout
		if code := f.run("inspect", "job"); code != 0 {
			t.Fatalf("exit code = %d, want 0; stderr %q", code, f.stderr)
		}
		out := f.stdout.String()
		for _, want := range []string{
			"state:        held",
			"holder:       test-holder",
			"token:        " + u64(holderToken),
			"waiters:      2",
			"  1. first (token " + u64(info.Waiters[0].Token) + ")",
			"  2. second (token " + u64(info.Waiters[1].Token) + ")",
		} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("output lacks line %q:\n%s", want, out)
			}
		}
		if !strings.Contains(out, "acquired at:  "+info.AcquiredAt.UTC().Format(time.RFC3339Nano)) {
			t.Errorf("output lacks the acquisition time %v:\n%s", info.AcquiredAt, out)
		}
	})
	t.Run("json", func(t *testing.T) {
		f.stdout = newNotifyBuffer()
		f.env.stdout = f.stdout
		if code := f.run("inspect", "--json", "job"); code != 0 {
			t.Fatalf("exit code = %d, want 0; stderr %q", code, f.stderr)
		}
		var got infoJSON
		if err := json.Unmarshal([]byte(f.stdout.String()), &got); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, f.stdout)
		}
		if got.Key != "job" || !got.Held || got.Owner != "test-holder" || got.Token != holderToken {
			t.Errorf("got %+v, want job held by test-holder with token %d", got, holderToken)
		}
		if got.AcquiredAt == nil || !got.AcquiredAt.Equal(info.AcquiredAt) {
			t.Errorf("acquired_at = %v, want %v", got.AcquiredAt, info.AcquiredAt)
		}
		want := []waiterJSON{{Owner: "first", Token: info.Waiters[0].Token}, {Owner: "second", Token: info.Waiters[1].Token}}
		if len(got.Waiters) != 2 || got.Waiters[0] != want[0] || got.Waiters[1] != want[1] {
			t.Errorf("waiters = %+v, want %+v", got.Waiters, want)
		}
		if got.Stamp != nil {
			t.Errorf("stamp = %+v, want none (stamps are off)", got.Stamp)
		}
	})
}

func TestInspectFreeKey(t *testing.T) {
	tests := []struct {
		name  string
		flags []string
		check func(t *testing.T, out string)
	}{
		{"text", nil, func(t *testing.T, out string) {
			for _, want := range []string{"key:      job\n", "state:    free\n", "waiters:  none\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "holder") {
				t.Errorf("a free key shows a holder:\n%s", out)
			}
		}},
		{"json", []string{"--json"}, func(t *testing.T, out string) {
			var got map[string]any
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out)
			}
			if got["held"] != false || got["key"] != "job" {
				t.Errorf("got %v, want job not held", got)
			}
			if w, ok := got["waiters"].([]any); !ok || len(w) != 0 {
				t.Errorf("waiters = %v, want an empty list", got["waiters"])
			}
			for _, absent := range []string{"owner", "token", "acquired_at", "stamp"} {
				if _, ok := got[absent]; ok {
					t.Errorf("a free key has %q: %v", absent, got)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			args := append(append([]string{"inspect"}, tt.flags...), "job")
			if code := f.run(args...); code != 0 {
				t.Fatalf("exit code = %d, want 0; stderr %q", code, f.stderr)
			}
			tt.check(t, f.stdout.String())
		})
	}
}

func TestWriteInfoTextShowsTheStamp(t *testing.T) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 8000000, time.UTC)
	info := ashlock.LockInfo{
		Key: "job", Held: true, Owner: "o", Token: 9, AcquiredAt: at,
		Stamp: ashlock.Timestamp{WallTime: at.UnixNano(), Logical: 2},
	}
	var b strings.Builder
	if err := writeInfoText(&b, info, at.Add(1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"acquired at:  2025-03-04T05:06:07.008Z (1.5s ago)\n",
		"stamp:        " + info.Stamp.String() + "\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestInspectUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"no key", []string{"inspect"}, exitUsage},
		{"two keys", []string{"inspect", "a", "b"}, exitUsage},
		{"flag after key", []string{"inspect", "a", "--json"}, exitUsage},
		{"unknown flag", []string{"inspect", "--bogus", "a"}, exitUsage},
		{"invalid key", []string{"inspect", "a\x7f"}, exitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if code := f.run(tt.args...); code != tt.want {
				t.Errorf("exit code = %d, want %d; stderr %q", code, tt.want, f.stderr)
			}
			if f.stderr.String() == "" {
				t.Error("no message on stderr")
			}
		})
	}
}

func u64(n uint64) string { return strconv.FormatUint(n, 10) }
