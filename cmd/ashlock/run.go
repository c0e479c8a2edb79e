//go:build unix

package main

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// runOptions is a parsed "ashlock run" invocation.
type runOptions struct {
	commonFlags
	ttl     time.Duration
	try     bool
	timeout time.Duration
	owner   string
	quiet   bool
	shared  bool   // --shared: a shared (read) lock
	permits int    // --permits: a counted lock with this many permits; 1 is a plain lock
	value   string // --value: published with the claim; "" publishes none
	key     string
	argv    []string // the command and its arguments, after "--"
}

// parseRun parses the arguments of "ashlock run". Flags come before KEY;
// everything after the "--" that follows KEY is the command, untouched.
// It returns done == true, with the exit code, when ashlock should stop
// here (help printed, or a usage error reported).
func parseRun(args []string, e *env) (o runOptions, code int, done bool) {
	fs := o.flagSet(e.getenv)
	if code, done := parseFlags(fs, "run", runHelp, args, e); done {
		return o, code, true
	}
	rest := fs.Args()
	switch {
	case len(rest) == 0:
		return o, e.usageError("run", "missing KEY and command"), true
	case len(rest) == 1 || rest[1] != "--":
		if len(rest) > 1 && len(rest[1]) > 1 && rest[1][0] == '-' {
			return o, e.usageError("run", "want \"--\" after KEY, got %q (flags go before KEY)", rest[1]), true
		}
		return o, e.usageError("run", "want \"--\" between KEY and the command"), true
	case len(rest) == 2:
		return o, e.usageError("run", "missing the command after \"--\""), true
	}
	o.key, o.argv = rest[0], rest[2:]
	if err := o.validate(); err != nil {
		return o, e.usageError("run", "%v", err), true
	}
	return o, 0, false
}

// flagSet returns the flags of "ashlock run", bound to o's fields.
func (o *runOptions) flagSet(getenv func(string) string) *flag.FlagSet {
	fs := newFlagSet("run")
	o.register(fs, getenv)
	fs.DurationVar(&o.ttl, "ttl", 30*time.Second, "lease TTL")
	fs.BoolVar(&o.try, "try", false, "do not wait")
	fs.DurationVar(&o.timeout, "timeout", 0, "bound on the wait")
	fs.StringVar(&o.owner, "owner", "", "holder label")
	fs.BoolVar(&o.quiet, "quiet", false, "no message when not acquired")
	fs.BoolVar(&o.shared, "shared", false, "take a shared (read) lock")
	o.permits = 1
	fs.Func("permits", "counted lock: at most N holders at once", func(v string) error {
		// Decimal only: flag's IntVar would read 010 as 8 and 0x10 as 16,
		// and a count that differs from other runs' is ErrPermitMismatch.
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("not a decimal number: %q", v)
		}
		o.permits = n
		return nil
	})
	fs.StringVar(&o.value, "value", "", "value published with the claim")
	return fs
}

func (o *runOptions) validate() error {
	if err := o.commonFlags.validate(); err != nil {
		return err
	}
	if o.ttl <= 0 {
		return fmt.Errorf("--ttl must be positive, got %v", o.ttl)
	}
	if o.timeout < 0 {
		return fmt.Errorf("--timeout must not be negative, got %v", o.timeout)
	}
	if o.permits < 1 || o.permits > backend.MaxPermits {
		return fmt.Errorf("--permits must be in 1..%d, got %d", backend.MaxPermits, o.permits)
	}
	if o.shared && o.permits > 1 {
		return fmt.Errorf("--shared and --permits %d do not go together: a shared lock counts as one permit", o.permits)
	}
	if len(o.value) > backend.MaxValueLen {
		return fmt.Errorf("--value is %d bytes, more than the %d (64 KiB) allowed", len(o.value), backend.MaxValueLen)
	}
	return nil
}

// graceFor is how long a command gets between SIGTERM and SIGKILL once
// the lock is lost: a third of the TTL, at most 10s. It is shorter than
// the lease so that the command is gone, or nearly, by the time another
// holder can have the lock; fencing tokens cover the rest.
func graceFor(ttl time.Duration) time.Duration {
	return min(ttl/3, 10*time.Second)
}

// runCommand is "ashlock run": take the lock, run the command under it,
// release it, and return the exit code.
func runCommand(args []string, e *env) int {
	o, code, done := parseRun(args, e)
	if done {
		return code
	}
	// Catch signals before connecting: from here on a default action
	// would kill ashlock with its claim still queued.
	sigs, stop := e.signals()
	defer stop()

	h, code := obtain(o, e, sigs)
	if h == nil {
		return code
	}
	code = supervise(h, o, e, sigs)
	// Signals still waiting on sigs came while the command ran, for it:
	// supervise may have seen the command's exit first. Only one that
	// comes during the release stops waiting for it.
	pendingCancel(sigs)
	h.releaseUnlessSignalled(o, e, sigs)
	return code
}
