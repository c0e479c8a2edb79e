//go:build unix

package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"syscall"

	"github.com/ash-lock/ashlock"
)

// Exit codes of ashlock itself. When the command ran and the lock held to
// the end, ashlock exits with the command's own status instead, so a
// command may exit with one of these numbers too; ashlock always writes a
// line to stderr when it exits with a code of its own, and the command did
// not run at all for 64, 69, 75, 126 and 127.
//
// The numbers follow sysexits.h where one fits (64, 69, 70, 75) and the
// shell convention for commands that cannot be run (126, 127); 76 is
// sysexits' EX_PROTOCOL, reused here because nothing closer exists.
const (
	exitOK          = 0
	exitUsage       = 64  // EX_USAGE: bad flags or arguments, invalid key, TTL or seed; --permits differs from the key's other runs
	exitUnavailable = 69  // EX_UNAVAILABLE: the backend could not be reached
	exitSoftware    = 70  // EX_SOFTWARE: an unexpected internal error
	exitNotAcquired = 75  // EX_TEMPFAIL: lock held (--try), --timeout passed, a signal before the command started
	exitLockLost    = 76  // the lock was lost while the command ran (the command was stopped)
	exitCannotRun   = 126 // the command exists but could not be started
	exitNotFound    = 127 // the command was not found
	exitSignalBase  = 128 // the command died of signal N: 128+N
)

// acquireExitCode maps an error from Connect, Acquire or TryAcquire to the
// exit code that tells a caller (cron, a script, systemd) what to do next:
// fix the invocation, retry later, or look at the backend.
func acquireExitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, ashlock.ErrInvalidKey),
		errors.Is(err, ashlock.ErrInvalidTTL),
		errors.Is(err, ashlock.ErrInvalidConfig),
		// The invocation disagrees with the key's other users on the
		// number of permits: a configuration to fix, not a busy lock to
		// retry. As 75 it would be silenced by --quiet and look like a
		// skipped turn on every run, each side excluding the other with
		// the wrong count; as 64 it is reported every time.
		errors.Is(err, ashlock.ErrPermitMismatch):
		return exitUsage
	case errors.Is(err, ashlock.ErrUnavailable):
		// Checked before the context errors: a wait that timed out
		// because the backend stopped answering is an outage to look
		// at, not a busy lock.
		return exitUnavailable
	case errors.Is(err, ashlock.ErrLocked),
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded),
		// A lease lost before the command started: nothing ran, the lock
		// was not (or no longer) ours, so this is "not acquired".
		errors.Is(err, ashlock.ErrLeaseExpired):
		return exitNotAcquired
	}
	return exitSoftware
}

// startExitCode maps an error from starting the command to 127 (not found)
// or 126 (found but not runnable), as shells and env(1) do.
func startExitCode(err error) int {
	// exec.ErrNotFound: no such name in $PATH; fs.ErrNotExist (ENOENT):
	// a path that does not exist, or a script whose interpreter does not.
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotRun
}

// childExitCode turns the command's final state into ashlock's exit code:
// its exit status, or 128+N if it died of signal N (the shell's
// convention, so that callers see the same number as when running the
// command directly from sh).
func childExitCode(st *os.ProcessState) int {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return st.ExitCode()
}
