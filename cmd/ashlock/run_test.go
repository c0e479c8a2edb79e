//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ash-lock/ashlock"
)

func TestRunPassesOnTheExitStatus(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   int
	}{
		{"success", "exit 0", 0},
		{"failure", "exit 3", 3},
		{"status above 128", "exit 200", 200},
		{"death by SIGKILL", "kill -KILL $$", 128 + 9},
		{"death by SIGTERM", "kill -TERM $$", 128 + 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if got := f.run("run", "job", "--", "sh", "-c", tt.script); got != tt.want {
				t.Errorf("exit code = %d, want %d; stderr %q", got, tt.want, f.stderr)
			}
			if info := f.inspect("job"); info.Held {
				t.Errorf("job still held after the command exited: %+v", info)
			}
		})
	}
}

func TestRunGivesTheCommandItsLock(t *testing.T) {
	f := newFixture(t)
	// Earlier holders, so that the token is not trivially 1.
	for range 3 {
		if err := f.hold("reports/nightly").Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	stdin, release := io.Pipe()
	f.env.stdin = stdin
	start := time.Now()
	codec := f.start("run", "--ttl", "9s", "--owner", "cron@host-a", "reports/nightly", "--",
		"sh", "-c", `echo "env:$ASHLOCK_KEY|$ASHLOCK_FENCING_TOKEN|$ASHLOCK_DEADLINE|"; read line`)
	f.stdout.waitFor(t, "|\n")

	// While the command runs, the store shows it as the holder.
	info := f.inspect("reports/nightly")
	fields := strings.Split(strings.TrimPrefix(strings.TrimSpace(f.stdout.String()), "env:"), "|")
	if len(fields) != 4 {
		t.Fatalf("command printed %q, want key|token|deadline|", f.stdout)
	}
	key, tokenText, deadlineText := fields[0], fields[1], fields[2]
	if key != "reports/nightly" {
		t.Errorf("ASHLOCK_KEY = %q, want %q", key, "reports/nightly")
	}
	token, err := strconv.ParseUint(tokenText, 10, 64)
	if err != nil {
		t.Errorf("ASHLOCK_FENCING_TOKEN = %q: %v", tokenText, err)
	}
	if !info.Held || info.Owner != "cron@host-a" || info.Token != token {
		t.Errorf("store shows %+v, want held by cron@host-a with token %d", info, token)
	}
	if token <= 3 {
		t.Errorf("token %d is not above the three earlier holders' tokens", token)
	}
	deadline, err := time.Parse(time.RFC3339Nano, deadlineText)
	if err != nil {
		t.Errorf("ASHLOCK_DEADLINE = %q: %v", deadlineText, err)
	}
	if deadline.Before(start) || deadline.After(time.Now().Add(9*time.Second)) {
		t.Errorf("ASHLOCK_DEADLINE = %v, want within the 9s TTL after %v", deadline, start)
	}
	if !strings.HasSuffix(deadlineText, "Z") {
		t.Errorf("ASHLOCK_DEADLINE = %q, want UTC", deadlineText)
	}

	fmt.Fprintln(release, "done")
	release.Close()
	if code := f.wait(codec); code != 0 {
		t.Errorf("exit code = %d, want 0; stderr %q", code, f.stderr)
	}
	if f.inspect("reports/nightly").Held {
		t.Error("key still held after the command exited")
	}
}

func TestRunTryOnAHeldKey(t *testing.T) {
	tests := []struct {
		name       string
		flags      []string
		wantStderr string // "" means none at all
	}{
		{"reports why", nil, "held elsewhere"},
		{"quiet", []string{"--quiet"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			g := f.hold("job")
			marker := filepath.Join(t.TempDir(), "ran")
			args := append(append([]string{"run", "--try"}, tt.flags...), "job", "--", "touch", marker)
			if code := f.run(args...); code != exitNotAcquired {
				t.Errorf("exit code = %d, want %d", code, exitNotAcquired)
			}
			assertNotRan(t, marker)
			switch stderr := f.stderr.String(); {
			case tt.wantStderr == "" && stderr != "":
				t.Errorf("stderr = %q, want nothing", stderr)
			case !strings.Contains(stderr, tt.wantStderr):
				t.Errorf("stderr = %q, want it to mention %q", stderr, tt.wantStderr)
			}
			if err := g.Err(); err != nil {
				t.Errorf("holder's guard ended: %v", err)
			}
			if info := f.inspect("job"); len(info.Waiters) != 0 {
				t.Errorf("--try left waiters behind: %+v", info.Waiters)
			}
		})
	}
}

func TestRunTimeoutGivesUp(t *testing.T) {
	f := newFixture(t)
	f.hold("job")
	marker := filepath.Join(t.TempDir(), "ran")
	if code := f.run("run", "--timeout", "50ms", "job", "--", "touch", marker); code != exitNotAcquired {
		t.Errorf("exit code = %d, want %d", code, exitNotAcquired)
	}
	assertNotRan(t, marker)
	if !strings.Contains(f.stderr.String(), "--timeout") {
		t.Errorf("stderr = %q, want it to mention --timeout", f.stderr)
	}
	if info := f.inspect("job"); len(info.Waiters) != 0 {
		t.Errorf("timed-out wait left waiters behind: %+v", info.Waiters)
	}
}

func TestRunWaitsItsTurn(t *testing.T) {
	f := newFixture(t)
	g := f.hold("job")
	codec := f.start("run", "job", "--", "sh", "-c", "echo ran with $ASHLOCK_FENCING_TOKEN")
	waitForWaiters(t, f, "job", 1)
	select {
	case code := <-codec:
		t.Fatalf("run finished (%d) while the key was held", code)
	default:
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code := f.wait(codec); code != 0 {
		t.Errorf("exit code = %d, want 0; stderr %q", code, f.stderr)
	}
	if !strings.Contains(f.stdout.String(), "ran with 2") {
		t.Errorf("stdout = %q, want the command to have run with token 2", f.stdout)
	}
}

func TestRunSignalWhileWaiting(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run("SIG"+signalName(sig)+" cancels", func(t *testing.T) {
			f := newFixture(t)
			f.hold("job")
			marker := filepath.Join(t.TempDir(), "ran")
			codec := f.start("run", "job", "--", "touch", marker)
			waitForWaiters(t, f, "job", 1)
			f.sigs <- sig
			if code := f.wait(codec); code != exitNotAcquired {
				t.Errorf("exit code = %d, want %d", code, exitNotAcquired)
			}
			assertNotRan(t, marker)
			if want := "cancelled by SIG" + signalName(sig); !strings.Contains(f.stderr.String(), want) {
				t.Errorf("stderr = %q, want %q", f.stderr, want)
			}
			if info := f.inspect("job"); len(info.Waiters) != 0 {
				t.Errorf("cancelled wait left its claim queued: %+v", info.Waiters)
			}
		})
	}
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2} {
		t.Run("SIG"+signalName(sig)+" is dropped", func(t *testing.T) {
			f := newFixture(t)
			g := f.hold("job")
			marker := filepath.Join(t.TempDir(), "ran")
			codec := f.start("run", "job", "--", "touch", marker)
			waitForWaiters(t, f, "job", 1)
			f.sigs <- sig
			// Signals are handled in order: if sig had cancelled the
			// wait, the command would not run once the key is free.
			if err := g.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			if code := f.wait(codec); code != 0 {
				t.Errorf("exit code = %d, want 0; stderr %q", code, f.stderr)
			}
			if _, err := os.Stat(marker); err != nil {
				t.Errorf("command did not run: %v", err)
			}
		})
	}
}

func TestRunForwardsSignalsToTheCommand(t *testing.T) {
	for _, sig := range forwarded {
		name := signalName(sig)
		t.Run("SIG"+name, func(t *testing.T) {
			unignore(t, sig)
			f := newFixture(t)
			// The shell waits on a background sleep so that the trap runs
			// at once; the trap kills the sleep, which in a non-interactive
			// shell ignores INT and QUIT.
			script := fmt.Sprintf(`trap 'kill $! 2>/dev/null; echo got-%[1]s; exit 7' %[1]s
echo ready
sleep 60 </dev/null >/dev/null 2>&1 &
wait`, name)
			codec := f.start("run", "job", "--", "sh", "-c", script)
			f.stdout.waitFor(t, "ready")
			f.sigs <- sig
			if code := f.wait(codec); code != 7 {
				t.Errorf("exit code = %d, want 7 (the trap's); stdout %q stderr %q", code, f.stdout, f.stderr)
			}
			if !strings.Contains(f.stdout.String(), "got-"+name) {
				t.Errorf("stdout = %q, want the trap's output", f.stdout)
			}
		})
	}
}

func TestRunLockLostTerminatesTheCommand(t *testing.T) {
	f := newFixture(t)
	codec := f.start("run", "--ttl", "5s", "job", "--", "sh", "-c", `trap 'echo got-TERM; exit 0' TERM
echo ready
sleep 60 </dev/null >/dev/null 2>&1 &
wait`)
	f.stdout.waitFor(t, "ready")
	if !f.backend.ExpireKey("job") {
		t.Fatal("job has no holder")
	}
	// The command exits 0 after SIGTERM, yet the run must report the loss.
	if code := f.wait(codec); code != exitLockLost {
		t.Errorf("exit code = %d, want %d; stderr %q", code, exitLockLost, f.stderr)
	}
	if !strings.Contains(f.stdout.String(), "got-TERM") {
		t.Errorf("stdout = %q, want the command to have got SIGTERM", f.stdout)
	}
	if !strings.Contains(f.stderr.String(), "lock lost") {
		t.Errorf("stderr = %q, want it to report the lost lock", f.stderr)
	}
	// The cause names the sentinel once, and the grace (a third of 5s)
	// reads as a person would write it.
	for _, line := range strings.Split(f.stderr.String(), "\n") {
		if n := strings.Count(line, "lease expired"); n > 1 {
			t.Errorf("stderr line %q says %q %d times", line, "lease expired", n)
		}
	}
	if !strings.Contains(f.stderr.String(), "SIGKILL after 1.67s") {
		t.Errorf("stderr = %q, want the grace printed as 1.67s", f.stderr)
	}
}

func TestRunLockLostKillsAfterTheGrace(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	tests := []struct {
		name   string
		script string
	}{
		{"command ignores SIGTERM", `trap '' TERM; echo ready; exec sleep 60`},
		{
			// The leader exits on SIGTERM but leaves a process behind in
			// its group that ignores it: it must not go on without the lock.
			// The straggler says ready once it ignores SIGTERM, so that the
			// loss cannot come before it does.
			"straggler ignores SIGTERM",
			`trap 'exit 0' TERM
(trap '' TERM; exec sh -c 'echo straggler=$$; echo ready; exec sleep 60 </dev/null >/dev/null 2>&1') &
wait`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			codec := f.start("run", "--ttl", ttl.String(), "job", "--", "sh", "-c", tt.script)
			f.stdout.waitFor(t, "ready")
			lostAt := time.Now()
			if !f.backend.ExpireKey("job") {
				t.Fatal("job has no holder")
			}
			if code := f.wait(codec); code != exitLockLost {
				t.Errorf("exit code = %d, want %d; stderr %q", code, exitLockLost, f.stderr)
			}
			// A lower bound only: the kill must not come before the grace.
			if elapsed, grace := time.Since(lostAt), graceFor(ttl); elapsed < grace {
				t.Errorf("ashlock returned %v after the loss, before the %v grace", elapsed, grace)
			}
			if !strings.Contains(f.stderr.String(), "; sending SIGKILL") {
				t.Errorf("stderr = %q, want it to report SIGKILL", f.stderr)
			}
			if m := regexp.MustCompile(`straggler=(\d+)`).FindStringSubmatch(f.stdout.String()); m != nil {
				pid, _ := strconv.Atoi(m[1])
				eventually(t, "the straggler to die", func() bool { return processGone(pid) })
			}
		})
	}
}

func TestRunCommandThatCannotStart(t *testing.T) {
	notExecutable := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		command string
		want    int
	}{
		{"not in PATH", "ashlock-test-no-such-command", exitNotFound},
		{"no such file", filepath.Join(t.TempDir(), "missing"), exitNotFound},
		{"not executable", notExecutable, exitCannotRun},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if code := f.run("run", "job", "--", tt.command); code != tt.want {
				t.Errorf("exit code = %d, want %d; stderr %q", code, tt.want, f.stderr)
			}
			if !strings.Contains(f.stderr.String(), "cannot run") {
				t.Errorf("stderr = %q, want a reason", f.stderr)
			}
			if f.inspect("job").Held {
				t.Error("key still held after the command failed to start")
			}
		})
	}
}

func TestRunUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"nothing", []string{"run"}, "missing KEY"},
		{"no separator", []string{"run", "job", "true"}, `want "--"`},
		{"flag after KEY", []string{"run", "job", "--try", "--", "true"}, "flags go before KEY"},
		{"no command", []string{"run", "job", "--"}, "missing the command"},
		{"unknown flag", []string{"run", "--bogus", "job", "--", "true"}, "bogus"},
		{"zero TTL", []string{"run", "--ttl", "0s", "job", "--", "true"}, "--ttl"},
		{"negative timeout", []string{"run", "--timeout", "-1s", "job", "--", "true"}, "--timeout"},
		{"bad duration", []string{"run", "--ttl", "soon", "job", "--", "true"}, "ttl"},
		{"zero connect timeout", []string{"run", "--connect-timeout", "0s", "job", "--", "true"}, "--connect-timeout"},
		{"control character in KEY", []string{"run", "jo\x01b", "--", "true"}, "invalid key"},
		{"unknown seed", []string{"run", "--seed", "nosuch://x", "job", "--", "true"}, "invalid configuration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if code := f.run(tt.args...); code != exitUsage {
				t.Errorf("exit code = %d, want %d", code, exitUsage)
			}
			if !strings.Contains(f.stderr.String(), tt.want) {
				t.Errorf("stderr = %q, want it to mention %q", f.stderr, tt.want)
			}
			if f.stdout.String() != "" {
				t.Errorf("stdout = %q, want nothing", f.stdout)
			}
		})
	}
}

func TestRunSeedComesFromTheEnvironment(t *testing.T) {
	tests := []struct {
		name     string
		envSeed  string
		args     []string
		wantSeed string
	}{
		{"default", "", nil, "memory://"},
		{"ASHLOCK_SEED", "etcd://10.0.0.1:2379/jobs/", nil, "etcd://10.0.0.1:2379/jobs/"},
		{"--seed wins", "etcd://10.0.0.1:2379/jobs/", []string{"--seed", "etcd://10.0.0.2:2379/"}, "etcd://10.0.0.2:2379/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.env.getenv = func(k string) string {
				if k == "ASHLOCK_SEED" {
					return tt.envSeed
				}
				return ""
			}
			var got string
			f.env.connect = func(ctx context.Context, cfg ashlock.LockConfig) (*ashlock.LockClient, error) {
				got = cfg.ClusterSeed
				return nil, fmt.Errorf("%w: test stops here", ashlock.ErrUnavailable)
			}
			args := append(append([]string{"run"}, tt.args...), "job", "--", "true")
			if code := f.run(args...); code != exitUnavailable {
				t.Errorf("exit code = %d, want %d", code, exitUnavailable)
			}
			if got != tt.wantSeed {
				t.Errorf("connected to %q, want %q", got, tt.wantSeed)
			}
		})
	}
}

func TestRunConnectTimeout(t *testing.T) {
	f := newFixture(t)
	f.env.connect = func(ctx context.Context, _ ashlock.LockConfig) (*ashlock.LockClient, error) {
		<-ctx.Done() // a backend that never answers
		return nil, errors.Join(ashlock.ErrUnavailable, ctx.Err())
	}
	if code := f.run("run", "--connect-timeout", "20ms", "job", "--", "true"); code != exitUnavailable {
		t.Errorf("exit code = %d, want %d; stderr %q", code, exitUnavailable, f.stderr)
	}
}

// waitForWaiters waits until key has n fair waiters queued in the store.
func waitForWaiters(t *testing.T, f *fixture, key string, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d waiters on %q", n, key), func() bool {
		return len(f.inspect(key).Waiters) == n
	})
}

// assertNotRan fails the test if the command that creates marker ran.
func assertNotRan(t *testing.T, marker string) {
	t.Helper()
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran (stat %s: %v)", marker, err)
	}
}

// unignore makes sure commands started during the test begin with sig's
// default action. A signal ignored when this process started (SIGHUP under
// nohup, say) stays ignored in the commands it starts, and a
// non-interactive shell cannot trap a signal ignored on entry, so the
// script's trap would never run. Handling sig here ends that: exec resets
// handled signals to their default.
func unignore(t *testing.T, sig os.Signal) {
	if !signal.Ignored(sig) {
		return
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, sig)
	t.Cleanup(func() { signal.Stop(c) })
}
