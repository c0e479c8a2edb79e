//go:build !unix

package chaos

import (
	"errors"
	"os"
)

var errNoSIGSTOP = errors.New("chaos: freezing a process needs SIGSTOP, which this platform lacks")

func signalStop(*os.Process) error { return errNoSIGSTOP }

func signalCont(*os.Process) error { return errNoSIGSTOP }
