//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/ash-lock/ashlock"
)

// groupPollInterval is how often ashlock checks whether the processes left
// in a lost command's group have exited. Nothing notifies a process of the
// exit of processes that are not its children, so this is the one place
// ashlock polls, bounded by the grace.
const groupPollInterval = 20 * time.Millisecond

// supervise runs o.argv while h holds the lock and returns ashlock's exit
// code: the command's, or exitLockLost if the lock was lost meanwhile. It
// does not start the command, and returns exitNotAcquired, if the lock is
// lost already or a signal that cancelsWait is waiting on sigs.
//
// The command runs in a process group of its own, so that every process
// it starts can be signalled together: forwarded signals, and on loss of
// the lock SIGTERM at once and SIGKILL after the grace.
func supervise(h *held, o runOptions, e *env, sigs <-chan os.Signal) int {
	token, err := h.guard.FencingToken()
	if err != nil {
		// Lost between Acquire and here: the command never ran.
		e.errorf("%q: lock lost before the command started: %v", o.key, err)
		return exitNotAcquired
	}
	cmd := exec.Command(o.argv[0], o.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	cmd.Env = append(os.Environ(),
		"ASHLOCK_KEY="+o.key,
		"ASHLOCK_FENCING_TOKEN="+strconv.FormatUint(token, 10),
		"ASHLOCK_DEADLINE="+h.guard.Deadline().UTC().Format(time.RFC3339Nano),
		// Always set, 0 for plain and shared locks, so that a command can
		// use it without checking how it was started.
		"ASHLOCK_PERMIT="+strconv.Itoa(h.guard.Permit()),
	)
	term := prepareChild(cmd, e.stdin)
	if e.beforeStart != nil {
		e.beforeStart()
	}
	// A signal can come after the wait's last look at sigs: while the
	// lock was being granted, or as the wait ended (untilSignal may take
	// the result over a signal that came at the same time). It was sent
	// to a run with no command yet, so it ends the run as it would have
	// ended the wait, rather than reaching a command started after it.
	if s := pendingCancel(sigs); s != nil {
		if !o.quiet {
			e.errorf("%q: cancelled by SIG%s as the lock was granted; the command was not started", o.key, signalName(s))
		}
		return exitNotAcquired
	}
	if err := cmd.Start(); err != nil {
		// The child may have taken the terminal before its exec failed:
		// take it back, or the shell that started ashlock finds its
		// terminal owned by a group that no longer exists.
		term.started()
		term.restore()
		e.errorf("cannot run %s: %v", o.argv[0], err)
		return startExitCode(err)
	}
	defer term.restore()
	term.started()

	pgid := cmd.Process.Pid // the leader of its own group (prepareChild)
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()

	grace := graceFor(o.ttl)
	stop := &stopper{pgid: pgid, grace: grace}
	defer stop.close()
	done := h.guard.Done()
	for {
		select {
		case s := <-sigs:
			if sig, ok := s.(syscall.Signal); ok {
				signalGroup(pgid, sig)
			}
		case <-done:
			done = nil
			// Signal first: the message could fail (a closed stderr), and
			// the command must not run on for it.
			stop.term()
			e.errorf("%q: lock lost while the command ran (%v); sent SIGTERM, SIGKILL after %v", o.key, h.guard.Err(), forPeople(grace))
		case <-stop.killC():
			e.errorf("%q: command still running %v after SIGTERM; sending SIGKILL", o.key, forPeople(grace))
			stop.kill()
		case err := <-waitc:
			return finish(h, o, e, cmd, err, stop)
		}
	}
}

// finish decides the exit code once the command's leader process has
// exited.
func finish(h *held, o runOptions, e *env, cmd *exec.Cmd, waitErr error, stop *stopper) int {
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		e.errorf("waiting for %s: %v", o.argv[0], waitErr)
		return exitSoftware
	}
	code := childExitCode(cmd.ProcessState)
	if !stop.termSent {
		// The loss may have landed just as the command exited, before the
		// select above saw Done. Count it: the command's last moments may
		// not have been protected, so "lost" is the safe report.
		if err := h.guard.Err(); !errors.Is(err, ashlock.ErrLeaseExpired) {
			return code
		}
		stop.term()
		e.errorf("%q: lock lost as the command exited (status %d)", o.key, code)
	}
	// Processes the command started may still be running in its group
	// without the lock: give them the rest of the grace, then kill them.
	if stop.drain() {
		e.errorf("%q: processes left in the command's group after %v; sending SIGKILL", o.key, forPeople(stop.grace))
	}
	e.errorf("%q: exiting %d (lock lost); the command's own status was %d", o.key, exitLockLost, code)
	return exitLockLost
}

// stopper stops a process group whose lock is lost: SIGTERM, then SIGKILL
// once the grace has passed.
type stopper struct {
	pgid     int
	grace    time.Duration
	timer    *time.Timer
	termSent bool
	killSent bool
}

func (s *stopper) term() {
	if s.termSent {
		return
	}
	s.termSent = true
	signalGroup(s.pgid, syscall.SIGTERM)
	s.timer = time.NewTimer(s.grace)
}

// killC fires when the grace is over; nil (never) before term or after
// kill.
func (s *stopper) killC() <-chan time.Time {
	if s.timer == nil || s.killSent {
		return nil
	}
	return s.timer.C
}

// signalGroup sends sig to process group pgid, and SIGCONT after SIGTERM
// and SIGHUP, as a shell's kill does: a stopped group would keep them
// pending, holding the lock for ever. ESRCH (the group just exited) is the
// only expected failure, and the exit is then about to be reported.
func signalGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
	if sig == syscall.SIGTERM || sig == syscall.SIGHUP {
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
	}
}

func (s *stopper) kill() {
	s.killSent = true
	_ = syscall.Kill(-s.pgid, syscall.SIGKILL)
}

// drain waits, after the leader has exited, until the rest of the group
// has gone too or the grace is over, and then kills what is left. It
// reports whether it had to.
//
// The leader has been reaped, so its pid, which names the group, could in
// principle be reused; the kernel does not hand out a pid while a group of
// that number still has members, so the group can only be confused with
// another once it is empty, and then kill(-pgid, 0) has already said so.
func (s *stopper) drain() (killed bool) {
	if s.killSent {
		return false
	}
	tick := time.NewTicker(groupPollInterval)
	defer tick.Stop()
	for syscall.Kill(-s.pgid, 0) == nil {
		select {
		case <-s.timer.C:
			s.kill()
			return true
		case <-tick.C:
		}
	}
	return false
}

func (s *stopper) close() {
	if s.timer != nil {
		s.timer.Stop()
	}
}
