//go:build unix

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ash-lock/ashlock"
)

// inspectOptions is a parsed "ashlock inspect" invocation.
type inspectOptions struct {
	commonFlags
	json bool
	key  string
}

// flagSet returns the flags of "ashlock inspect", bound to o's fields.
func (o *inspectOptions) flagSet(getenv func(string) string) *flag.FlagSet {
	fs := newFlagSet("inspect")
	o.register(fs, getenv)
	fs.BoolVar(&o.json, "json", false, "print JSON")
	return fs
}

// parseInspect parses the arguments of "ashlock inspect" as parseRun does.
func parseInspect(args []string, e *env) (o inspectOptions, code int, done bool) {
	fs := o.flagSet(e.getenv)
	if code, done := parseFlags(fs, "inspect", inspectHelp, args, e); done {
		return o, code, true
	}
	switch fs.NArg() {
	case 0:
		return o, e.usageError("inspect", "missing KEY"), true
	case 1:
	default:
		return o, e.usageError("inspect", "want one KEY, got %d arguments (flags go before KEY)", fs.NArg()), true
	}
	o.key = fs.Arg(0)
	if err := o.validate(); err != nil {
		return o, e.usageError("inspect", "%v", err), true
	}
	return o, 0, false
}

// inspectCommand is "ashlock inspect": print the state of one key. A free
// key is not an error.
func inspectCommand(args []string, e *env) int {
	o, code, done := parseInspect(args, e)
	if done {
		return code
	}
	// Inspect is one quick read: no signal handling, the default action
	// (exit) leaves nothing behind.
	ctx, cancel := context.WithTimeout(context.Background(), o.connectTimeout)
	defer cancel()
	client, err := connect(ctx, e, o.commonFlags)
	if err != nil {
		e.errorf("%v", err)
		return acquireExitCode(err)
	}
	defer closeClient(e, client)
	info, err := client.Inspect(ctx, o.key)
	if err != nil {
		e.errorf("inspecting %q: %v", o.key, err)
		return inspectExitCode(err)
	}
	if o.json {
		err = writeInfoJSON(e.stdout, info)
	} else {
		err = writeInfoText(e.stdout, info, time.Now())
	}
	if err != nil {
		e.errorf("writing output: %v", err)
		return exitSoftware
	}
	return exitOK
}

// inspectExitCode maps an Inspect failure: a timeout is the backend not
// answering, not a busy lock.
func inspectExitCode(err error) int {
	if code := acquireExitCode(err); code != exitNotAcquired {
		return code
	}
	return exitUnavailable
}

// infoJSON is the --json shape: stable field names, times in RFC 3339.
type infoJSON struct {
	Key        string       `json:"key"`
	Held       bool         `json:"held"`
	Owner      string       `json:"owner,omitempty"`
	Token      uint64       `json:"token,omitempty"`
	AcquiredAt *time.Time   `json:"acquired_at,omitempty"`
	Stamp      *stampJSON   `json:"stamp,omitempty"`
	Waiters    []waiterJSON `json:"waiters"`
}

type stampJSON struct {
	WallTime int64  `json:"wall_time"` // Unix nanoseconds
	Logical  uint32 `json:"logical"`
}

type waiterJSON struct {
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	Shared bool   `json:"shared,omitempty"`
}

func writeInfoJSON(w io.Writer, info ashlock.LockInfo) error {
	out := infoJSON{Key: info.Key, Held: info.Held, Owner: info.Owner, Token: info.Token, Waiters: []waiterJSON{}}
	if !info.AcquiredAt.IsZero() {
		at := info.AcquiredAt.UTC()
		out.AcquiredAt = &at
	}
	if !info.Stamp.IsZero() {
		out.Stamp = &stampJSON{WallTime: info.Stamp.WallTime, Logical: info.Stamp.Logical}
	}
	for _, wt := range info.Waiters {
		out.Waiters = append(out.Waiters, waiterJSON(wt))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// writeInfoText prints info for people: one "field: value" line each,
// then the waiters in queue order. now dates the "ago".
func writeInfoText(w io.Writer, info ashlock.LockInfo, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "key:\t%s\n", info.Key)
	if info.Held {
		fmt.Fprintf(tw, "state:\theld\n")
		fmt.Fprintf(tw, "holder:\t%s\n", info.Owner)
		fmt.Fprintf(tw, "token:\t%d\n", info.Token)
		if !info.AcquiredAt.IsZero() {
			ago := now.Sub(info.AcquiredAt).Round(time.Millisecond)
			fmt.Fprintf(tw, "acquired at:\t%s (%v ago)\n", info.AcquiredAt.UTC().Format(time.RFC3339Nano), ago)
		}
		if !info.Stamp.IsZero() {
			fmt.Fprintf(tw, "stamp:\t%s\n", info.Stamp)
		}
	} else {
		fmt.Fprintf(tw, "state:\tfree\n")
	}
	if len(info.Waiters) == 0 {
		fmt.Fprintf(tw, "waiters:\tnone\n")
	} else {
		fmt.Fprintf(tw, "waiters:\t%d\n", len(info.Waiters))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	for i, wt := range info.Waiters {
		fmt.Fprintf(&b, "  %d. %s (token %d)\n", i+1, wt.Owner, wt.Token)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
