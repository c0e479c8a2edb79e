//go:build unix

// Package cli_test runs the ashlock command, built from cmd/ashlock, as
// separate processes against a real embedded etcd: what a cron job or a
// shell script sees.
package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// Exit codes of ashlock (documented in "ashlock run --help").
const (
	exitNotAcquired = 75
	exitLockLost    = 76
)

// waitBound bounds every wait in these tests.
const waitBound = 30 * time.Second

var (
	shared *etcdtest.Cluster // the etcd every test uses, each under its own prefix
	binary string            // the ashlock executable
)

type withServer struct{ m *testing.M }

func (w withServer) Run() int {
	dir, err := os.MkdirTemp("", "ashlock-cli-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "ashlock")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	out, err := exec.CommandContext(ctx, "go", "build", "-o", binary, "github.com/ash-lock/ashlock/cmd/ashlock").CombinedOutput()
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building ashlock: %v\n%s", err, out)
		return 1
	}

	ctx, cancel = context.WithTimeout(context.Background(), etcdtest.StartTimeout)
	c, err := etcdtest.Launch(ctx, etcdtest.Options{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	shared = c
	defer c.Close()
	return w.m.Run()
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(withServer{m}, etcdtest.IgnoredGoroutines()...)
}

var prefixSeq atomic.Int64

// seedFor returns a seed for the shared etcd under a prefix no other test
// uses, and that prefix.
func seedFor(t *testing.T) (seed, prefix string) {
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	prefix = fmt.Sprintf("cli%d-%s/", prefixSeq.Add(1), name)
	return "etcd://" + strings.Join(shared.Endpoints(), ",") + "/" + prefix, prefix
}

// holdKey takes key through the library, as another process would, and
// returns the guard; the client is closed at cleanup.
func holdKey(t *testing.T, seed, key string) *ashlock.Guard {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	c, err := ashlock.Connect(ctx, ashlock.LockConfig{ClusterSeed: seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("closing the holder's client: %v", err)
		}
	})
	g, err := c.Lock(key).WithOwner("test-holder").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Reachable until the test ends: a Guard dropped without Unlock is
	// released.
	t.Cleanup(func() { runtime.KeepAlive(g) })
	return g
}

// proc is a running ashlock.
type proc struct {
	cmd    *exec.Cmd
	stdin  *os.File      // the command's stdin; closing it gives EOF
	lines  <-chan string // the command's stdout, line by line; closed at EOF
	stderr *bytes.Buffer // read only after wait
}

// start runs ashlock with args. Its stdin is a pipe the test may write to
// or close, its stdout a pipe read line by line; cleanup kills it if the
// test has not waited for it.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	cmd := exec.CommandContext(ctx, binary, args...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdin: stdinW, stderr: new(bytes.Buffer)}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, w, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	stdin.Close()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	p.lines = lines
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait() // a no-op error if the test waited already
		stdinW.Close()
		r.Close()
		for range lines { // until the reader has stopped
		}
	})
	return p
}

// waitLine returns the next line of output starting with prefix.
func (p *proc) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(waitBound)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				// The process is ending (or was killed at waitBound): its
				// stderr is complete, and safe to read, once Wait returns.
				_ = p.cmd.Wait()
				t.Fatalf("output ended before a line starting %q; stderr %q", prefix, p.stderr)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no line starting %q within %v", prefix, waitBound)
		}
	}
}

// wait waits for ashlock to exit and returns its exit code.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	err := p.cmd.Wait()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("waiting for ashlock: %v", err)
	}
	if errors.Is(p.cmd.Err, context.DeadlineExceeded) {
		t.Fatalf("ashlock did not exit within %v; stderr %q", waitBound, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// run runs ashlock to the end and returns its exit code and stderr.
func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	p := start(t, args...)
	code := p.wait(t)
	return code, p.stderr.String()
}

// revokeClaims revokes the lease of every claim under prefix, as an
// operator might, and returns how many leases it revoked.
func revokeClaims(t *testing.T, cli *clientv3.Client, prefix string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	revoked := map[int64]bool{}
	for _, kv := range resp.Kvs {
		if kv.Lease == 0 || revoked[kv.Lease] {
			continue
		}
		if _, err := cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
			t.Fatalf("revoking lease %x of %s: %v", kv.Lease, kv.Key, err)
		}
		revoked[kv.Lease] = true
	}
	return len(revoked)
}

// inspect returns the state of key as the library sees it.
func inspect(t *testing.T, seed, key string) ashlock.LockInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	c, err := ashlock.Connect(ctx, ashlock.LockConfig{ClusterSeed: seed})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// eventually polls cond until it holds, failing after waitBound. Only for
// states nothing announces (a queue in etcd, another process's exit).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// processGone reports whether pid no longer runs (gone, or a zombie).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
