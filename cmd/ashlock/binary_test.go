//go:build unix

package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBinaryExitStatusAndEnvironment(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		args []string
		want int
	}{
		{
			"command sees its lock",
			nil,
			[]string{"run", "job", "--", "sh", "-c", `test "$ASHLOCK_KEY" = job && test "$ASHLOCK_FENCING_TOKEN" -gt 0 && test -n "$ASHLOCK_DEADLINE" && exit 42`},
			42,
		},
		{"ASHLOCK_SEED is used", []string{"ASHLOCK_SEED=nope://"}, []string{"run", "job", "--", "true"}, exitUsage},
		{"command not found", nil, []string{"run", "job", "--", "ashlock-test-no-such-command"}, exitNotFound},
		{"usage", nil, []string{"run", "job"}, exitUsage},
		{"no arguments", nil, nil, exitUsage},
		{"help", nil, []string{"--help"}, 0},
		{"inspect on memory", nil, []string{"inspect", "job"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runBinary(t, tt.env, tt.args...)
			if r.code != tt.want {
				t.Errorf("exit code = %d, want %d; stderr %q", r.code, tt.want, r.stderr)
			}
		})
	}
}

// startBinary starts ashlock with args, its stdout on a pipe whose lines
// arrive on the returned channel (closed at EOF). Cleanup kills ashlock's
// and the command's groups if the test left them running.
func startBinary(t *testing.T, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	return startProgram(t, binary, args...)
}

// startProgram is startBinary for any program.
func startProgram(t *testing.T, program string, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	cmd := exec.CommandContext(ctx, program, args...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		r.Close()
		for range lines { // until the reader goroutine is done
		}
	})
	return cmd, lines
}

// nextLine returns the next line with the given prefix, failing the test
// at EOF or after testTimeout.
func nextLine(t *testing.T, lines <-chan string, prefix string) string {
	t.Helper()
	deadline := time.After(testTimeout)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before a line starting %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no line starting %q within %v", prefix, testTimeout)
		}
	}
}

// waitExit waits for cmd and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("waiting for ashlock: %v", err)
	}
	if errors.Is(cmd.Err, context.DeadlineExceeded) {
		t.Fatalf("ashlock did not exit within %v", testTimeout)
	}
	return cmd.ProcessState.ExitCode()
}

func TestBinaryForwardsRealSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT} {
		name := signalName(sig)
		t.Run("SIG"+name, func(t *testing.T) {
			// ashlock leaves a signal ignored if it starts ignored (as
			// SIGINT is for a background job of a non-interactive shell).
			unignore(t, sig)
			cmd, lines := startBinary(t, "run", "job", "--", "sh", "-c",
				`trap 'kill $! 2>/dev/null; echo got-`+name+`; exit 7' `+name+`
echo ready
sleep 60 </dev/null >/dev/null 2>&1 &
wait`)
			nextLine(t, lines, "ready")
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			nextLine(t, lines, "got-"+name)
			if code := waitExit(t, cmd); code != 7 {
				t.Errorf("exit code = %d, want 7 (the trap's)", code)
			}
		})
	}
}

// Run under nohup (SIGHUP ignored when it starts), ashlock leaves SIGHUP
// ignored: a hangup neither ends it nor reaches the command, which still
// gets the signals ashlock does forward.
func TestBinaryLeavesAnIgnoredSignalIgnored(t *testing.T) {
	// The shell ignores HUP, then becomes ashlock, which inherits that.
	cmd, lines := startProgram(t, "sh", "-c", `trap '' HUP; exec "$0" "$@"`,
		binary, "run", "job", "--", "sh", "-c", `trap 'echo got-USR1' USR1
trap 'kill -KILL $! 2>/dev/null; echo got-TERM; exit 7' TERM
(trap '' USR1; exec sleep 60) </dev/null >/dev/null 2>&1 &
echo ready
while :; do wait $!; done`)
	nextLine(t, lines, "ready")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// Caught and forwarded, the HUP would have ended the command (its
	// default action) before it could answer the USR1 sent after it.
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	nextLine(t, lines, "got-USR1")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	nextLine(t, lines, "got-TERM")
	if code := waitExit(t, cmd); code != 7 {
		t.Errorf("exit code = %d, want 7 (the trap's)", code)
	}
}
