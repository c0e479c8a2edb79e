package main

import (
	"syscall"
	"unsafe"
)

// foregroundGroup returns the foreground process group of the terminal
// open on fd (tcgetpgrp); an error if fd is not this process's terminal.
func foregroundGroup(fd int) (int, error) {
	var pgrp int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp))); errno != 0 {
		return 0, errno
	}
	return int(pgrp), nil
}

// setForegroundGroup makes pgrp the foreground group of the terminal open
// on fd (tcsetpgrp).
func setForegroundGroup(fd, pgrp int) error {
	p := int32(pgrp)
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p))); errno != 0 {
		return errno
	}
	return nil
}

// setParentDeathSignal makes the kernel SIGKILL the command when ashlock
// dies, however it dies: nobody renews the lease after that, so the
// command would go on without the lock.
//
// The kernel sends it when the thread that started the command exits, not
// the process. That is the same here: the Go runtime only ends threads
// that a goroutine locked and left locked, and ashlock locks none.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
