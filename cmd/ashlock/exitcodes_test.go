//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ash-lock/ashlock"
)

func TestAcquireExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"locked", fmt.Errorf("try: %w", ashlock.ErrLocked), exitNotAcquired},
		{"wait cancelled", errors.Join(errors.New("wait"), context.Canceled), exitNotAcquired},
		{"wait timed out", errors.Join(errors.New("wait"), context.DeadlineExceeded), exitNotAcquired},
		{"lease lost before start", fmt.Errorf("x: %w", ashlock.ErrLeaseExpired), exitNotAcquired},
		{"unavailable", fmt.Errorf("x: %w", ashlock.ErrUnavailable), exitUnavailable},
		{"unavailable and timed out", errors.Join(ashlock.ErrUnavailable, context.DeadlineExceeded), exitUnavailable},
		{"invalid key", ashlock.ErrInvalidKey, exitUsage},
		{"invalid TTL", ashlock.ErrInvalidTTL, exitUsage},
		{"invalid config", ashlock.ErrInvalidConfig, exitUsage},
		{"permit mismatch", fmt.Errorf("x: %w", ashlock.ErrPermitMismatch), exitUsage},
		{"permit mismatch, explained", &mismatchError{err: ashlock.ErrPermitMismatch, theirs: 3}, exitUsage},
		{"closed", ashlock.ErrClosed, exitSoftware},
		{"anything else", errors.New("surprise"), exitSoftware},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := acquireExitCode(tt.err); got != tt.want {
				t.Errorf("acquireExitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

func TestStartExitCode(t *testing.T) {
	dir := t.TempDir()
	notExecutable := filepath.Join(dir, "plain")
	if err := os.WriteFile(notExecutable, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	badInterpreter := filepath.Join(dir, "script")
	if err := os.WriteFile(badInterpreter, []byte("#!/no/such/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		want int
	}{
		{"not in PATH", "ashlock-test-no-such-command", exitNotFound},
		{"missing file", filepath.Join(dir, "missing"), exitNotFound},
		{"missing interpreter", badInterpreter, exitNotFound},
		{"not executable", notExecutable, exitCannotRun},
		{"a directory", dir, exitCannotRun},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := exec.Command(tt.path).Start()
			if err == nil {
				t.Fatalf("starting %s succeeded", tt.path)
			}
			if got := startExitCode(err); got != tt.want {
				t.Errorf("startExitCode(%v) = %d, want %d", err, got, tt.want)
			}
		})
	}
}

func TestChildExitCode(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   int
	}{
		{"zero", "exit 0", 0},
		{"status", "exit 9", 9},
		{"signal", "kill -USR2 $$", 128 + 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("sh", "-c", tt.script)
			var exitErr *exec.ExitError
			if err := cmd.Run(); err != nil && !errors.As(err, &exitErr) {
				t.Fatal(err)
			}
			if got := childExitCode(cmd.ProcessState); got != tt.want {
				t.Errorf("childExitCode = %d, want %d", got, tt.want)
			}
		})
	}
}
