//go:build unix

package chaos

import (
	"os"
	"syscall"
)

// signalStop freezes p: the kernel stops every thread of the process until
// SIGCONT, so its timers, keep-alives and pending writes all wait.
func signalStop(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// signalCont resumes a process frozen by signalStop.
func signalCont(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
