//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
)

// aside is a run started beside the fixture's own, with a stdin and a
// stdout of its own, so that several runs can hold a key at once and be
// told apart and let go one by one.
type aside struct {
	codec  <-chan int
	stdout *notifyBuffer
	stdin  *io.PipeWriter // closing it ends the holdScript command
}

// holdScript prints "in PERMIT TOKEN" and holds until its stdin closes.
const holdScript = `echo "in $ASHLOCK_PERMIT $ASHLOCK_FENCING_TOKEN"; read line || :`

// startAside runs dispatch(args) in a goroutine like f.start, with its
// own stdin pipe and stdout buffer; cleanup closes the pipe.
func (f *fixture) startAside(args ...string) *aside {
	r, w := io.Pipe()
	f.t.Cleanup(func() { w.Close() })
	e := *f.env
	a := &aside{stdout: newNotifyBuffer(), stdin: w}
	e.stdin, e.stdout = r, a.stdout
	codec := make(chan int, 1)
	go func() { codec <- dispatch(args, &e) }()
	a.codec = codec
	return a
}

// holding waits until a's holdScript command runs and returns the permit
// and token it was given.
func (a *aside) holding(t *testing.T) (permit int, token uint64) {
	t.Helper()
	a.stdout.waitFor(t, "\n")
	if _, err := fmt.Sscanf(a.stdout.String(), "in %d %d\n", &permit, &token); err != nil {
		t.Fatalf("command printed %q, want \"in PERMIT TOKEN\": %v", a.stdout, err)
	}
	return permit, token
}

// finish lets a's command exit and checks that the run exits 0.
func (a *aside) finish(t *testing.T, f *fixture) {
	t.Helper()
	a.stdin.Close()
	if code := f.wait(a.codec); code != 0 {
		t.Errorf("exit code = %d, want 0; stderr %q", code, f.stderr)
	}
}

// holderTokens returns the tokens of info's holders and whether all are
// shared.
func holderTokens(info ashlock.LockInfo) (tokens []uint64, allShared bool) {
	allShared = true
	for _, h := range info.Holders {
		tokens = append(tokens, h.Token)
		allShared = allShared && h.Shared
	}
	slices.Sort(tokens)
	return tokens, allShared
}

func TestRunSharedRunsHoldTogether(t *testing.T) {
	f := newFixture(t)
	a := f.startAside("run", "--shared", "--owner", "reader-a", "db", "--", "sh", "-c", holdScript)
	b := f.startAside("run", "--shared", "--owner", "reader-b", "db", "--", "sh", "-c", holdScript)
	permitA, tokenA := a.holding(t)
	permitB, tokenB := b.holding(t)
	if permitA != 0 || permitB != 0 {
		t.Errorf("ASHLOCK_PERMIT = %d and %d, want 0 for shared runs", permitA, permitB)
	}
	info := f.inspect("db")
	tokens, allShared := holderTokens(info)
	if want := []uint64{min(tokenA, tokenB), max(tokenA, tokenB)}; !slices.Equal(tokens, want) || !allShared {
		t.Errorf("store shows holders %+v, want two shared holders with tokens %v", info.Holders, want)
	}

	// A plain run is excluded meanwhile.
	marker := filepath.Join(t.TempDir(), "ran")
	if code := f.run("run", "--try", "db", "--", "touch", marker); code != exitNotAcquired {
		t.Errorf("plain --try run beside two shared ones: exit code = %d, want %d", code, exitNotAcquired)
	}
	assertNotRan(t, marker)

	a.finish(t, f)
	b.finish(t, f)
	if info := f.inspect("db"); info.Held {
		t.Errorf("db still held after both runs: %+v", info)
	}
}

func TestRunSharedWaitsForAPlainHolder(t *testing.T) {
	f := newFixture(t)
	g := f.hold("db")
	codec := f.start("run", "--shared", "db", "--", "sh", "-c", `echo "ran $ASHLOCK_FENCING_TOKEN"`)
	waitForWaiters(t, f, "db", 1)
	if w := f.inspect("db").Waiters[0]; !w.Shared {
		t.Errorf("queued run shows as %+v, want a shared waiter", w)
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code := f.wait(codec); code != 0 {
		t.Errorf("exit code = %d, want 0; stderr %q", code, f.stderr)
	}
	if !strings.Contains(f.stdout.String(), "ran ") {
		t.Errorf("stdout = %q, want the command to have run", f.stdout)
	}
}

func TestRunPermitsLetNRunsHold(t *testing.T) {
	f := newFixture(t)
	a := f.startAside("run", "--permits", "2", "--owner", "a", "backups", "--", "sh", "-c", holdScript)
	b := f.startAside("run", "--permits", "2", "--owner", "b", "backups", "--", "sh", "-c", holdScript)
	permitA, _ := a.holding(t)
	permitB, _ := b.holding(t)
	if got := []int{min(permitA, permitB), max(permitA, permitB)}; !slices.Equal(got, []int{0, 1}) {
		t.Errorf("ASHLOCK_PERMIT of the two runs = %d, %d; want 0 and 1", permitA, permitB)
	}
	info := f.inspect("backups")
	if info.Permits != 2 || len(info.Holders) != 2 {
		t.Errorf("store shows %d permits, holders %+v; want 2 permits, 2 holders", info.Permits, info.Holders)
	}
	for _, h := range info.Holders {
		want := map[string]int{"a": permitA, "b": permitB}
		if p, ok := want[h.Owner]; !ok || p != h.Permit {
			t.Errorf("holder %+v: want owner a (permit %d) or b (permit %d)", h, permitA, permitB)
		}
	}

	// A third run finds both permits taken.
	marker := filepath.Join(t.TempDir(), "ran")
	if code := f.run("run", "--permits", "2", "--try", "backups", "--", "touch", marker); code != exitNotAcquired {
		t.Errorf("third --try run: exit code = %d, want %d; stderr %q", code, exitNotAcquired, f.stderr)
	}
	assertNotRan(t, marker)

	a.finish(t, f)
	// A permit is free again: the next run gets the one a had.
	if code := f.run("run", "--permits", "2", "backups", "--", "sh", "-c", `echo "permit=$ASHLOCK_PERMIT"`); code != 0 {
		t.Errorf("run after a's release: exit code = %d, want 0; stderr %q", code, f.stderr)
	}
	if want := fmt.Sprintf("permit=%d\n", permitA); !strings.Contains(f.stdout.String(), want) {
		t.Errorf("stdout = %q, want %q (the permit released)", f.stdout, want)
	}
	b.finish(t, f)
}

func TestRunExportsThePermit(t *testing.T) {
	tests := []struct {
		name  string
		flags []string
	}{
		{"plain", nil},
		{"shared", []string{"--shared"}},
		{"one permit", []string{"--permits", "1"}},
		{"shared with one permit", []string{"--shared", "--permits", "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			args := append(append([]string{"run"}, tt.flags...), "job", "--", "sh", "-c", `echo "permit=${ASHLOCK_PERMIT-unset}"`)
			if code := f.run(args...); code != 0 {
				t.Fatalf("exit code = %d, want 0; stderr %q", code, f.stderr)
			}
			if got := f.stdout.String(); got != "permit=0\n" {
				t.Errorf("stdout = %q, want ASHLOCK_PERMIT=0", got)
			}
		})
	}
	t.Run("counted", func(t *testing.T) {
		f := newFixture(t)
		// The test holds one of three permits: the run gets another.
		ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
		defer cancel()
		g, err := f.client.Lock("pool").WithPermits(3).WithOwner("test-holder").Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { runtime.KeepAlive(g) })
		a := f.startAside("run", "--permits", "3", "--owner", "cli", "pool", "--", "sh", "-c", holdScript)
		permit, token := a.holding(t)
		if permit < 0 || permit > 2 || permit == g.Permit() {
			t.Errorf("ASHLOCK_PERMIT = %d, want one of 0..2 other than the test's %d", permit, g.Permit())
		}
		var found bool
		for _, h := range f.inspect("pool").Holders {
			if h.Owner == "cli" {
				found = true
				if h.Permit != permit || h.Token != token {
					t.Errorf("store shows %+v, want permit %d, token %d", h, permit, token)
				}
			}
		}
		if !found {
			t.Error("store does not show the run as a holder")
		}
		a.finish(t, f)
	})
}

func TestRunPublishesTheValue(t *testing.T) {
	f := newFixture(t)
	const value = "build 42 from host-a\nline two"
	a := f.startAside("run", "--value", value, "job", "--", "sh", "-c", holdScript)
	a.holding(t)
	info := f.inspect("job")
	if len(info.Holders) != 1 || string(info.Holders[0].Value) != value {
		t.Errorf("store shows holders %+v, want one with value %q", info.Holders, value)
	}
	f.stdout = newNotifyBuffer()
	f.env.stdout = f.stdout
	if code := f.run("inspect", "job"); code != 0 {
		t.Fatalf("inspect: exit code = %d; stderr %q", code, f.stderr)
	}
	if want := "value:        " + strconv.Quote(value) + "\n"; !strings.Contains(f.stdout.String(), want) {
		t.Errorf("inspect output lacks %q:\n%s", want, f.stdout)
	}
	a.finish(t, f)
}

func TestRunPermitMismatch(t *testing.T) {
	tests := []struct {
		name  string
		flags []string
		want  string // in stderr
	}{
		{"other count", []string{"--permits", "2"}, "asks for --permits 2, but the runs holding or queued on the key use 3 permits"},
		{"plain", nil, "asks for a plain lock (one permit), but the runs holding or queued on the key use 3 permits"},
		{"shared", []string{"--shared"}, "asks for --shared (one permit), but"},
		{"plain, waiting", []string{"--timeout", "1m"}, "use 3 permits"},
		{"plain, quiet", []string{"--try", "--quiet"}, "use 3 permits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
			defer cancel()
			g, err := f.client.Lock("pool").WithPermits(3).Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { runtime.KeepAlive(g) })
			marker := filepath.Join(t.TempDir(), "ran")
			args := append(append([]string{"run"}, tt.flags...), "pool", "--", "touch", marker)
			if code := f.run(args...); code != exitUsage {
				t.Errorf("exit code = %d, want %d; stderr %q", code, exitUsage, f.stderr)
			}
			assertNotRan(t, marker)
			if !strings.Contains(f.stderr.String(), tt.want) {
				t.Errorf("stderr = %q, want it to mention %q", f.stderr, tt.want)
			}
			if !strings.Contains(f.stderr.String(), "same --permits") {
				t.Errorf("stderr = %q, want it to say how to fix it", f.stderr)
			}
			if info := f.inspect("pool"); len(info.Waiters) != 0 || len(info.Holders) != 1 {
				t.Errorf("mismatched run left something behind: %+v", info)
			}
		})
	}
}

func TestRunNewFlagsUsageErrors(t *testing.T) {
	maxValue := strings.Repeat("v", 64<<10)
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"zero permits", []string{"--permits", "0"}, "--permits must be in 1..1024, got 0"},
		{"negative permits", []string{"--permits", "-2"}, "--permits must be in 1..1024, got -2"},
		{"too many permits", []string{"--permits", "1025"}, "--permits must be in 1..1024, got 1025"},
		{"permits not a number", []string{"--permits", "three"}, "permits"},
		{"permits in hex", []string{"--permits", "0x10"}, `not a decimal number: "0x10"`},
		{"shared with permits", []string{"--shared", "--permits", "2"}, "--shared and --permits 2"},
		{"value over 64 KiB", []string{"--value", maxValue + "v"}, "--value is 65537 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.env.connect = func(context.Context, ashlock.LockConfig) (*ashlock.LockClient, error) {
				t.Error("a usage error connected to the backend")
				return nil, ashlock.ErrUnavailable
			}
			marker := filepath.Join(t.TempDir(), "ran")
			args := append(append([]string{"run"}, tt.args...), "job", "--", "touch", marker)
			if code := f.run(args...); code != exitUsage {
				t.Errorf("exit code = %d, want %d; stderr %q", code, exitUsage, f.stderr)
			}
			assertNotRan(t, marker)
			if !strings.Contains(f.stderr.String(), tt.want) {
				t.Errorf("stderr = %q, want it to mention %q", f.stderr, tt.want)
			}
			if f.stdout.String() != "" {
				t.Errorf("stdout = %q, want nothing", f.stdout)
			}
		})
	}
	// The limits themselves are accepted.
	accepted := []struct {
		name string
		args []string
	}{
		{"1024 permits", []string{"--permits", "1024"}},
		{"shared with one permit", []string{"--shared", "--permits", "1"}},
		{"value of 64 KiB", []string{"--value", maxValue}},
	}
	for _, tt := range accepted {
		t.Run("accepts "+tt.name, func(t *testing.T) {
			f := newFixture(t)
			args := append(append([]string{"run"}, tt.args...), "job", "--", "true")
			if code := f.run(args...); code != 0 {
				t.Errorf("exit code = %d, want 0; stderr %q", code, f.stderr)
			}
		})
	}
}

// --permits is read in decimal: 010 is ten permits, not eight (Go's flag
// package would read it as octal).
func TestRunPermitsAreDecimal(t *testing.T) {
	f := newFixture(t)
	o, code, done := parseRun([]string{"--permits", "010", "job", "--", "true"}, f.env)
	require.False(t, done, "exit code %d, stderr %q", code, f.stderr)
	assert.Equal(t, 10, o.permits)
}
