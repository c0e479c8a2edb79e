//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ash-lock/ashlock"
)

// observeOptions is a parsed "ashlock observe" invocation.
type observeOptions struct{ keyOptions }

// flagSet returns the flags of "ashlock observe", bound to o's fields.
func (o *observeOptions) flagSet(getenv func(string) string) *flag.FlagSet {
	return o.flags("observe", "print one JSON object per line", getenv)
}

// parseObserve parses the arguments of "ashlock observe" as parseRun does.
func parseObserve(args []string, e *env) (o observeOptions, code int, done bool) {
	code, done = o.parse(o.flagSet(e.getenv), "observe", observeHelp, args, e)
	return o, code, done
}

// observeCommand is "ashlock observe": print who leads the election KEY
// now, then one line per change, until a signal ends it.
func observeCommand(args []string, e *env) int {
	o, code, done := parseObserve(args, e)
	if done {
		return code
	}
	// Caught from the start, so that INT and TERM end the observation
	// cleanly (exit 0) rather than by their default action.
	sigs, stop := e.signals()
	defer stop()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Connecting and observing block, so they run aside while this
	// goroutine watches for signals (USR1 and USR2 are dropped, as run
	// drops them while waiting).
	err, caught := untilSignal(sigs, cancel, func() error { return o.observe(ctx, e) })
	switch {
	case caught != nil:
		// Interrupted: the way an observation is meant to end, whatever
		// the connection or the observation was doing.
		return exitOK
	case err == nil:
		// Observe ends without an error only when ctx ends, which only a
		// signal does here.
		e.errorf("observing %q: the observation ended by itself", o.key)
		return exitSoftware
	}
	e.errorf("%v", err)
	return observeExitCode(err)
}

// observe connects and prints every state Observe yields until ctx ends
// (nil) or something fails (the error, ready to be shown).
func (o observeOptions) observe(ctx context.Context, e *env) error {
	client, err := connect(ctx, e, o.commonFlags)
	if err != nil {
		return err
	}
	defer closeClient(e, client)
	write := func(l ashlock.Leader, at time.Time) error { return writeLeaderText(e.stdout, l, at) }
	if o.json {
		enc := json.NewEncoder(e.stdout) // one object per line, no indent
		write = func(l ashlock.Leader, at time.Time) error { return enc.Encode(leaderJSONOf(l, at)) }
	}
	for l, err := range client.Election(o.key).Observe(ctx) {
		if err != nil {
			return fmt.Errorf("observing %q: %w", o.key, err)
		}
		if err := write(l, time.Now()); err != nil {
			return &writeError{err}
		}
	}
	return nil
}

// writeError is a failure to write the output, told apart from the
// library's errors for the exit code.
type writeError struct{ err error }

func (w *writeError) Error() string { return "writing output: " + w.err.Error() }
func (w *writeError) Unwrap() error { return w.err }

// observeExitCode maps a failure of connecting or observing to an exit
// code. Observe retries what can pass by itself (an unreachable etcd, a
// failed watch, a compaction) without a word, so an error it yields is
// final: the etcd client closed (ErrUnavailable), the backend closed under
// the client (ErrClosed: ashlock closes its client only on the way out, so
// this is the backend going away, not a bug), a name that cannot be a key
// (ErrInvalidKey, 64). A timeout while connecting is the backend not
// answering, as for inspect.
func observeExitCode(err error) int {
	if _, ok := errors.AsType[*writeError](err); ok {
		return exitSoftware
	}
	if errors.Is(err, ashlock.ErrClosed) {
		return exitUnavailable
	}
	if code := acquireExitCode(err); code != exitNotAcquired {
		return code
	}
	return exitUnavailable
}

// observedTime is how observe prints times in text: UTC, to the
// millisecond, of fixed width so that the lines' fields line up.
const observedTime = "2006-01-02T15:04:05.000Z07:00"

// writeLeaderText prints one state as one line, dated at:
//
//	2026-12-01T17:25:00.123Z leader owner=host:123 token=57 since=2026-12-01T17:24:58.001Z value="10.0.0.1:80"
//	2026-12-01T17:25:09.456Z no leader
//
// The value comes last, shown as inspect shows it (quoted if printable,
// else its length and a hex prefix), and only if the leader published
// one; the owner label is quoted when it has spaces, quotes or
// characters that are not printable, so that a line's fields can always
// be told apart and no label or value can forge a line.
func writeLeaderText(w io.Writer, l ashlock.Leader, at time.Time) error {
	var b strings.Builder
	b.WriteString(at.UTC().Format(observedTime))
	if l.Token == 0 {
		b.WriteString(" no leader\n")
	} else {
		fmt.Fprintf(&b, " leader owner=%s token=%d", showWord(l.Owner), l.Token)
		if !l.Since.IsZero() {
			b.WriteString(" since=" + l.Since.UTC().Format(observedTime))
		}
		if len(l.Value) > 0 {
			b.WriteString(" value=" + showValue(l.Value))
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// showWord renders s as one word of a "field=word" list: as it is if it
// is made of printable characters other than spaces and quotes, quoted
// otherwise (and when empty).
func showWord(s string) string {
	if s == "" || !utf8.ValidString(s) {
		// Invalid bytes decode as U+FFFD, which is printable, but may be
		// control bytes to a terminal that is not UTF-8 (0x9b is CSI).
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) || r == '"' {
			return strconv.Quote(s)
		}
	}
	return s
}

// leaderJSON is the --json shape of one state: stable field names, times
// in RFC 3339 (UTC). Value is base64, as inspect --json writes values, so
// that any bytes come through. Owner, token, value and since are left out
// when nobody leads (and value when the leader published none).
type leaderJSON struct {
	Name       string     `json:"name"`
	Leader     bool       `json:"leader"`
	Owner      string     `json:"owner,omitempty"`
	Token      uint64     `json:"token,omitempty"`
	Value      []byte     `json:"value,omitempty"`
	Since      *time.Time `json:"since,omitempty"`
	ObservedAt time.Time  `json:"observed_at"`
}

func leaderJSONOf(l ashlock.Leader, at time.Time) leaderJSON {
	return leaderJSON{
		Name: l.Name, Leader: l.Token != 0, Owner: l.Owner, Token: l.Token, Value: l.Value,
		Since: timeJSON(l.Since), ObservedAt: at.UTC(),
	}
}
