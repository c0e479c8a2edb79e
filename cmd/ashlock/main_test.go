//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/memory"
)

// testTimeout bounds every wait in these tests.
const testTimeout = 20 * time.Second

// binary is the ashlock executable built once for the tests that need a
// real process (real signals, real exit statuses, a terminal).
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ashlock-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "ashlock")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	out, err := exec.CommandContext(ctx, "go", "build", "-o", binary, ".").CombinedOutput()
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building ashlock: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// notifyBuffer is a concurrency-safe buffer that can be waited on: the
// command under test writes to it from exec's copying goroutine while the
// test waits for a line to show up.
type notifyBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // receives a token after each write
}

func newNotifyBuffer() *notifyBuffer {
	return &notifyBuffer{changed: make(chan struct{}, 1)}
}

func (b *notifyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default: // a wake-up is already pending
	}
	return n, err
}

func (b *notifyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor blocks until the buffer contains s, failing the test after
// testTimeout.
func (b *notifyBuffer) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(testTimeout)
	for !strings.Contains(b.String(), s) {
		select {
		case <-b.changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %q; have %q", s, b.String())
		}
	}
}

// fixture runs subcommands in-process against one shared memory backend,
// so that the test can hold locks, expire leases and inspect queues that
// the command under test also sees. Signals come from a channel the test
// drives.
type fixture struct {
	t       *testing.T
	backend *memory.Backend
	client  *ashlock.LockClient // the test's own client
	stdout  *notifyBuffer
	stderr  *notifyBuffer
	sigs    chan os.Signal
	env     *env
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	be := memory.New()
	t.Cleanup(func() { be.Close() })
	f := &fixture{
		t:       t,
		backend: be,
		stdout:  newNotifyBuffer(),
		stderr:  newNotifyBuffer(),
		sigs:    make(chan os.Signal, 4),
	}
	f.client = f.connect(t)
	f.env = &env{
		stdin:  strings.NewReader(""),
		stdout: f.stdout,
		stderr: f.stderr,
		getenv: func(string) string { return "" },
		signals: func() (<-chan os.Signal, func()) {
			return f.sigs, func() {}
		},
		connect: func(ctx context.Context, cfg ashlock.LockConfig) (*ashlock.LockClient, error) {
			if cfg.ClusterSeed != "memory://" {
				return nil, fmt.Errorf("%w: fixture seed %q", ashlock.ErrInvalidConfig, cfg.ClusterSeed)
			}
			return ashlock.ConnectWith(ctx, cfg, be)
		},
	}
	return f
}

// connect returns a client of the fixture's backend, closed at cleanup.
func (f *fixture) connect(t *testing.T) *ashlock.LockClient {
	t.Helper()
	c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{}, f.backend)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// hold takes key with the test's own client and returns the guard.
func (f *fixture) hold(key string) *ashlock.Guard {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), testTimeout)
	defer cancel()
	g, err := f.client.Lock(key).WithOwner("test-holder").Acquire(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	// Reachable until the test ends: a Guard dropped without Unlock is
	// released.
	f.t.Cleanup(func() { runtime.KeepAlive(g) })
	return g
}

// inspect returns the backend's view of key.
func (f *fixture) inspect(key string) ashlock.LockInfo {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), testTimeout)
	defer cancel()
	info, err := f.client.Inspect(ctx, key)
	if err != nil {
		f.t.Fatal(err)
	}
	return info
}

// start runs dispatch(args) in a goroutine and returns a channel that
// receives its exit code.
func (f *fixture) start(args ...string) <-chan int {
	codec := make(chan int, 1)
	go func() { codec <- dispatch(args, f.env) }()
	return codec
}

// run runs dispatch(args) and returns its exit code.
func (f *fixture) run(args ...string) int {
	f.t.Helper()
	return f.wait(f.start(args...))
}

// wait returns the exit code from codec, failing after testTimeout.
func (f *fixture) wait(codec <-chan int) int {
	f.t.Helper()
	select {
	case code := <-codec:
		return code
	case <-time.After(testTimeout):
		f.t.Fatalf("command did not finish within %v; stdout %q stderr %q", testTimeout, f.stdout, f.stderr)
		return -1
	}
}

// eventually polls cond until it holds, failing after testTimeout. Only
// for states that announce themselves in no other way (a queue in the
// backend).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// result is the outcome of running the binary.
type result struct {
	code           int
	stdout, stderr string
}

// runBinary runs the built ashlock with args and the given extra
// environment, bounded by testTimeout.
func runBinary(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("running ashlock %q: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("ashlock %q did not finish within %v", args, testTimeout)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// processGone reports whether pid no longer runs (exited, or a zombie
// nobody has reaped yet, which cannot do anything either).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false // not Linux, or just exiting: ask again
	}
	// Format: "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
