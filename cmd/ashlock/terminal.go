//go:build unix

package main

import (
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// terminal remembers whether the command was given the controlling
// terminal, so that ashlock can take it back when the command exits.
//
// The command always runs in a process group of its own. When ashlock is
// run from an interactive shell, ashlock's group owns the terminal, and a
// command in another group that reads from the terminal would be stopped
// (SIGTTIN) while ashlock waited for it forever. So in that case the
// command's group is made the terminal's foreground group: it reads the
// terminal, and Ctrl-C reaches it directly (not through ashlock, which
// would otherwise deliver it twice).
type terminal struct {
	fd      int // stdin's descriptor, when the command got the terminal
	ownPgrp int
	handed  bool
}

// prepareChild puts cmd in a new process group, giving that group the
// terminal when ashlock's own group has it, and arranges for the command
// to be killed if ashlock dies (where the system supports it: the lock is
// no longer renewed then, so the command must not outlive ashlock).
func prepareChild(cmd *exec.Cmd, stdin io.Reader) *terminal {
	attr := &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(attr)
	cmd.SysProcAttr = attr
	t := &terminal{}
	f, ok := stdin.(*os.File)
	if !ok {
		return t
	}
	fd := int(f.Fd())
	fg, err := foregroundGroup(fd)
	if err != nil || fg != syscall.Getpgrp() {
		return t // not a terminal, or not ours to give
	}
	// Ctty is a descriptor in the child, where stdin is 0.
	attr.Foreground, attr.Ctty = true, 0
	t.fd, t.ownPgrp, t.handed = fd, fg, true
	return t
}

// started is called once the command runs. From now on ashlock is in a
// background group of the terminal: ignoring SIGTTOU lets it write its
// messages and take the terminal back without being stopped. (Done after
// the start so the command does not inherit the ignored disposition.)
func (t *terminal) started() {
	if t.handed {
		signal.Ignore(syscall.SIGTTOU)
	}
}

// restore gives the terminal back to ashlock's group, so that the shell or
// script that started ashlock finds it as it left it.
func (t *terminal) restore() {
	if t.handed {
		_ = setForegroundGroup(t.fd, t.ownPgrp)
	}
}
