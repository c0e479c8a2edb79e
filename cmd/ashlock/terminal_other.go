//go:build unix && !linux

package main

import (
	"errors"
	"syscall"
)

// errNoTerminalControl: handing the terminal to the command is implemented
// on Linux only; elsewhere the command runs in a background group.
var errNoTerminalControl = errors.New("terminal control not supported on this system")

func foregroundGroup(int) (int, error) { return 0, errNoTerminalControl }

func setForegroundGroup(int, int) error { return errNoTerminalControl }

// setParentDeathSignal does nothing where the system has no parent-death
// signal: if ashlock is killed, the command runs on without the lock.
func setParentDeathSignal(*syscall.SysProcAttr) {}
