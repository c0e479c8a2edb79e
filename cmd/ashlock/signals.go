//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// forwarded are the signals ashlock catches from the moment it starts
// working on a lock. While the command runs each one is passed on to the
// command's process group; before it starts and once it has exited, see
// cancelsWait. Catching them all from the start matters: a default action
// would kill ashlock and leave its claim in the queue until the lease
// expires.
var forwarded = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP,
	syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

// cancelsWait reports whether sig ends a wait while no command runs:
// received before the command has started (while ashlock connects, waits
// for the lock, or has just been granted it) it abandons the run; received
// while ashlock releases the lock after the command has exited, it ends
// the wait for the release. The signals whose default action is to stop a
// process do; SIGUSR1 and SIGUSR2, with no command to go to, are dropped.
func cancelsWait(sig os.Signal) bool {
	switch sig {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
		return true
	}
	return false
}

// notifySignals starts catching the forwarded signals and returns the
// channel they arrive on and a function that restores their default
// handling. The channel is buffered so that a burst is not lost while the
// receiver is busy sending the previous one on.
//
// A signal that was ignored when ashlock started is left ignored: under
// nohup, SIGHUP is meant to reach neither ashlock nor the command, and
// catching it would both expose ashlock to it and give the command the
// default action back (exec resets caught signals, not ignored ones).
func notifySignals() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 2*len(forwarded))
	var catch []os.Signal
	for _, sig := range forwarded {
		if !signal.Ignored(sig) {
			catch = append(catch, sig)
		}
	}
	if len(catch) > 0 {
		signal.Notify(ch, catch...)
	}
	return ch, func() { signal.Stop(ch) }
}

// survivePipes keeps ashlock alive when its stdout or stderr is a pipe
// whose reader has gone (ashlock run ... 2>&1 | head): by default a write
// there raises SIGPIPE, which would kill ashlock - perhaps in the middle of
// stopping a command whose lock is lost, leaving the command's group
// running without it. Caught, SIGPIPE only makes such writes fail. (Not
// ignored: the command would inherit an ignored SIGPIPE.)
func survivePipes() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// signalName is sig's short name for messages ("TERM", "INT").
func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if name := sigNames[s]; name != "" {
			return name
		}
	}
	return sig.String()
}

var sigNames = map[syscall.Signal]string{
	syscall.SIGINT: "INT", syscall.SIGTERM: "TERM", syscall.SIGHUP: "HUP",
	syscall.SIGQUIT: "QUIT", syscall.SIGUSR1: "USR1", syscall.SIGUSR2: "USR2",
	syscall.SIGKILL: "KILL",
}

// pendingCancel takes every signal already waiting on sigs and returns the
// first one that cancelsWait, or nil if none did. The others are dropped,
// as during the wait. A signal still on its way to sigs is not seen: it
// counts as one that came after the caller's next step.
func pendingCancel(sigs <-chan os.Signal) os.Signal {
	var caught os.Signal
	for {
		select {
		case s := <-sigs:
			if caught == nil && cancelsWait(s) {
				caught = s
			}
		default:
			return caught
		}
	}
}

// untilSignal runs work on a goroutine of its own while this one watches
// sigs, and returns work's result. The first signal that cancelsWait calls
// cancel and is returned as caught (nil if none came); other signals are
// dropped. It always waits for work to return, so that nothing work does
// (a lock it took, a line it writes) outlives the caller's decision.
func untilSignal[T any](sigs <-chan os.Signal, cancel func(), work func() T) (res T, caught os.Signal) {
	done := make(chan T, 1)
	go func() { done <- work() }()
	for {
		select {
		case s := <-sigs:
			if caught == nil && cancelsWait(s) {
				caught = s
				cancel()
			}
		case res = <-done:
			return res, caught
		}
	}
}
