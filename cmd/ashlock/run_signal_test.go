//go:build unix

package main

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A signal that comes after the lock was granted but before the command
// started counts as one that came during the wait: the lock is released,
// the command never starts, and the run exits 75.
func TestRunSignalBeforeTheCommandStarts(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run("SIG"+signalName(sig)+" cancels", func(t *testing.T) {
			f := newFixture(t)
			f.env.beforeStart = func() { f.sigs <- sig }
			marker := filepath.Join(t.TempDir(), "ran")
			code := f.run("run", "job", "--", "touch", marker)
			assert.Equal(t, exitNotAcquired, code, "stderr %q", f.stderr)
			assertNotRan(t, marker)
			assert.Contains(t, f.stderr.String(), "cancelled by SIG"+signalName(sig))
			info := f.inspect("job")
			assert.False(t, info.Held, "lock not released: %+v", info)
			assert.Empty(t, info.Waiters)
		})
	}
	t.Run("quiet", func(t *testing.T) {
		f := newFixture(t)
		f.env.beforeStart = func() { f.sigs <- syscall.SIGTERM }
		marker := filepath.Join(t.TempDir(), "ran")
		assert.Equal(t, exitNotAcquired, f.run("run", "--quiet", "job", "--", "touch", marker))
		assertNotRan(t, marker)
		assert.Empty(t, f.stderr.String())
		assert.False(t, f.inspect("job").Held)
	})
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2} {
		t.Run("SIG"+signalName(sig)+" is dropped", func(t *testing.T) {
			f := newFixture(t)
			f.env.beforeStart = func() { f.sigs <- sig }
			// Forwarded, the signal's default action would end the shell.
			code := f.run("run", "job", "--", "sh", "-c", "echo ran; exit 3")
			assert.Equal(t, 3, code, "stderr %q", f.stderr)
			assert.Equal(t, "ran\n", f.stdout.String())
		})
	}
}
