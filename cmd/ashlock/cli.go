//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ash-lock/ashlock"
)

// env is everything a subcommand takes from the outside world. main fills
// it with the real thing; tests substitute writers, a signal channel they
// drive themselves, and a connect function that shares one in-process
// backend between the test and the command.
type env struct {
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	getenv  func(string) string
	signals func() (<-chan os.Signal, func())
	connect func(context.Context, ashlock.LockConfig) (*ashlock.LockClient, error)
	// beforeStart, if not nil, is called by "ashlock run" once it holds
	// the lock, just before it looks for signals that came before the
	// command started. Tests use it to send a signal at that moment; main
	// leaves it nil.
	beforeStart func()
}

// errorf writes one "ashlock: ..." line to stderr. Error arguments are
// shown with errText.
func (e *env) errorf(format string, args ...any) {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = errText(err)
		}
	}
	fmt.Fprintf(e.stderr, "ashlock: "+format+"\n", args...)
}

// usageError reports a bad invocation of sub and returns exitUsage.
func (e *env) usageError(sub string, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "ashlock %s: %s\nRun 'ashlock %s --help' for usage.\n", sub, fmt.Sprintf(format, args...), sub)
	return exitUsage
}

// dispatch runs the subcommand named by args[0] and returns the process's
// exit code.
func dispatch(args []string, e *env) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, toolHelp)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return runCommand(args[1:], e)
	case "inspect":
		return inspectCommand(args[1:], e)
	case "observe":
		return observeCommand(args[1:], e)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			// "ashlock help run" shows the same text as "ashlock run --help".
			return dispatch([]string{args[1], "--help"}, e)
		}
		fmt.Fprint(e.stdout, toolHelp)
		return exitOK
	}
	fmt.Fprintf(e.stderr, "ashlock: unknown command %q\nRun 'ashlock --help' for usage.\n", args[0])
	return exitUsage
}

// commonFlags are the flags every subcommand has.
type commonFlags struct {
	seed           string
	connectTimeout time.Duration
}

func (c *commonFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	seed := getenv("ASHLOCK_SEED")
	if seed == "" {
		seed = "memory://"
	}
	fs.StringVar(&c.seed, "seed", seed, "backend URL")
	fs.DurationVar(&c.connectTimeout, "connect-timeout", 10*time.Second, "bound on reaching the backend")
}

func (c *commonFlags) validate() error {
	if c.connectTimeout <= 0 {
		return fmt.Errorf("--connect-timeout must be positive, got %v", c.connectTimeout)
	}
	return nil
}

// newFlagSet returns a flag set that reports nothing by itself: parse
// prints errors and help in ashlock's own format.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("ashlock "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs. It returns done == true with the exit
// code when the invocation ends here: help was asked for (printed on
// stdout, exit 0) or the flags are wrong (exit 64).
func parseFlags(fs *flag.FlagSet, sub, help string, args []string, e *env) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(e.stdout, help)
		return exitOK, true
	case err != nil:
		return e.usageError(sub, "%v", err), true
	}
	return 0, false
}

// connect opens the backend named by seed, bounded by timeout and by ctx.
// Library log records at warning level and above (a poisoned guard, a
// failed release) go to stderr.
func connect(ctx context.Context, e *env, c commonFlags) (*ashlock.LockClient, error) {
	ctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	return e.connect(ctx, ashlock.LockConfig{ClusterSeed: c.seed, Logger: newLogger(e.stderr)})
}

// closeClient closes client with a bounded context of its own: the
// caller's may be cancelled already, and Close must still release.
func closeClient(e *env, client *ashlock.LockClient) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := client.Close(ctx); err != nil {
		e.errorf("closing the client: %v", err)
	}
}

// cleanupTimeout bounds Unlock and Close after the command has exited.
const cleanupTimeout = 10 * time.Second

// newLogger returns the logger handed to the library: warnings and errors
// only, as text on w, so that a lost lease or a failed release shows up in
// the job's log next to ashlock's own messages.
func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// errText renders a library error for a one-line message: without the
// library's own "ashlock: " prefix (ours is already there) and with the
// parts of a joined error on one line.
func errText(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", "; ")
	return strings.ReplaceAll(s, "ashlock: ", "")
}

// forPeople rounds d to three significant digits, as a person reads a
// duration: "1.67s" for a third of 5s, not "1.666666666s".
func forPeople(d time.Duration) time.Duration {
	unit := time.Duration(1)
	for d/unit >= 1000 {
		unit *= 10
	}
	return d.Round(unit)
}
