//go:build unix

package main

import (
	"context"
	"encoding/json"
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

// inspectOptions is a parsed "ashlock inspect" invocation.
type inspectOptions struct{ keyOptions }

// flagSet returns the flags of "ashlock inspect", bound to o's fields.
func (o *inspectOptions) flagSet(getenv func(string) string) *flag.FlagSet {
	return o.flags("inspect", "print JSON", getenv)
}

// parseInspect parses the arguments of "ashlock inspect" as parseRun does.
func parseInspect(args []string, e *env) (o inspectOptions, code int, done bool) {
	code, done = o.parse(o.flagSet(e.getenv), "inspect", inspectHelp, args, e)
	return o, code, done
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
// Owner, Token, AcquiredAt and Stamp are the oldest holder's, so that a
// reader that knows only plain locks reads them as before; Holders lists
// every holder.
type infoJSON struct {
	Key        string       `json:"key"`
	Held       bool         `json:"held"`
	Owner      string       `json:"owner,omitempty"`
	Token      uint64       `json:"token,omitempty"`
	AcquiredAt *time.Time   `json:"acquired_at,omitempty"`
	Stamp      *stampJSON   `json:"stamp,omitempty"`
	Permits    int          `json:"permits"` // 0 when nothing holds or waits
	Holders    []holderJSON `json:"holders"`
	Waiters    []waiterJSON `json:"waiters"`
}

type stampJSON struct {
	WallTime int64  `json:"wall_time"` // Unix nanoseconds
	Logical  uint32 `json:"logical"`
}

type holderJSON struct {
	Owner      string     `json:"owner"`
	Token      uint64     `json:"token"`
	Permit     int        `json:"permit"`
	Shared     bool       `json:"shared"`
	Value      []byte     `json:"value,omitempty"` // base64, as encoding/json writes []byte
	AcquiredAt *time.Time `json:"acquired_at,omitempty"`
	Stamp      *stampJSON `json:"stamp,omitempty"`
}

type waiterJSON struct {
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	Shared bool   `json:"shared,omitempty"`
}

func writeInfoJSON(w io.Writer, info ashlock.LockInfo) error {
	out := infoJSON{
		Key: info.Key, Held: info.Held, Owner: info.Owner, Token: info.Token, Permits: info.Permits,
		AcquiredAt: timeJSON(info.AcquiredAt), Stamp: stampOf(info.Stamp),
		Holders: []holderJSON{}, Waiters: []waiterJSON{},
	}
	for _, h := range holdersOf(info) {
		out.Holders = append(out.Holders, holderJSON{
			Owner: h.Owner, Token: h.Token, Permit: h.Permit, Shared: h.Shared, Value: h.Value,
			AcquiredAt: timeJSON(h.AcquiredAt), Stamp: stampOf(h.Stamp),
		})
	}
	for _, wt := range info.Waiters {
		out.Waiters = append(out.Waiters, waiterJSON(wt))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// timeJSON returns t in UTC, or nil (field left out) for the zero time.
func timeJSON(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// stampOf returns s as JSON, or nil (field left out) for no stamp.
func stampOf(s ashlock.Timestamp) *stampJSON {
	if s.IsZero() {
		return nil
	}
	return &stampJSON{WallTime: s.WallTime, Logical: s.Logical}
}

// holdersOf returns the holders of info, oldest first. A backend that
// reports a held key without Holders gets one made of the oldest holder's
// fields, so that a held key never shows an empty list.
func holdersOf(info ashlock.LockInfo) []ashlock.Holder {
	if len(info.Holders) > 0 || !info.Held {
		return info.Holders
	}
	return []ashlock.Holder{{Owner: info.Owner, Token: info.Token, AcquiredAt: info.AcquiredAt, Stamp: info.Stamp}}
}

// writeInfoText prints info for people: one "field: value" line each,
// then the waiters in queue order. now dates the "ago".
//
// A key held by one exclusive holder, not counted, shows that holder in
// fields of its own (holder, token, acquired at, stamp, value), the
// plain lock's layout. Any other held key shows its permit
// count if counted and a numbered list of holders, each with its token,
// permit (counted keys), shared mark and fields.
func writeInfoText(w io.Writer, info ashlock.LockInfo, now time.Time) error {
	var t textBlock
	t.field("key", info.Key)
	holders := holdersOf(info)
	counted := info.Permits > 1
	switch {
	case !info.Held:
		t.field("state", "free")
	case len(holders) == 1 && !holders[0].Shared && !counted:
		h := holders[0]
		t.field("state", "held")
		t.field("holder", showLabel(h.Owner))
		t.field("token", strconv.FormatUint(h.Token, 10))
		holderFields(&t, h, now)
	default:
		t.field("state", "held")
		if counted {
			t.field("permits", strconv.Itoa(info.Permits))
		}
		t.field("holders", strconv.Itoa(len(holders)))
		for i, h := range holders {
			var sub textBlock
			holderFields(&sub, h, now)
			num := fmt.Sprintf("  %d. ", i+1)
			t.line(fmt.Sprintf("%s%s (%s)", num, showLabel(h.Owner), holderMarks(h, counted)))
			t.nest(&sub, strings.Repeat(" ", len(num)))
		}
	}
	if len(info.Waiters) == 0 {
		t.field("waiters", "none")
	} else {
		t.field("waiters", strconv.Itoa(len(info.Waiters)))
		for i, wt := range info.Waiters {
			shared := ""
			if wt.Shared {
				shared = ", shared"
			}
			t.line(fmt.Sprintf("  %d. %s (token %d%s)", i+1, showLabel(wt.Owner), wt.Token, shared))
		}
	}
	_, err := io.WriteString(w, t.String())
	return err
}

// holderFields adds h's acquisition time, stamp and value, those it has.
func holderFields(t *textBlock, h ashlock.Holder, now time.Time) {
	if !h.AcquiredAt.IsZero() {
		ago := now.Sub(h.AcquiredAt).Round(time.Millisecond)
		t.field("acquired at", fmt.Sprintf("%s (%v ago)", h.AcquiredAt.UTC().Format(time.RFC3339Nano), ago))
	}
	if !h.Stamp.IsZero() {
		t.field("stamp", h.Stamp.String())
	}
	if len(h.Value) > 0 {
		t.field("value", showValue(h.Value))
	}
}

// holderMarks is the parenthesised part of a holder's list line.
func holderMarks(h ashlock.Holder, counted bool) string {
	s := "token " + strconv.FormatUint(h.Token, 10)
	if counted {
		s += ", permit " + strconv.Itoa(h.Permit)
	}
	if h.Shared {
		s += ", shared"
	}
	return s
}

// textBlock collects "label: value" fields and other lines, and writes the
// fields' values aligned in one column, two spaces after the longest
// label, whatever lines come between the fields.
type textBlock struct {
	rows []textRow
}

// textRow is a field (label set), a line of its own, or a nested block.
type textRow struct {
	label, value string
	line         string
	sub          *textBlock
	indent       string // of sub
}

func (t *textBlock) field(label, value string) {
	t.rows = append(t.rows, textRow{label: label + ":", value: value})
}

func (t *textBlock) line(s string) { t.rows = append(t.rows, textRow{line: s}) }

// nest adds b, each of its lines prefixed with indent, its fields aligned
// among themselves.
func (t *textBlock) nest(b *textBlock, indent string) {
	if len(b.rows) > 0 {
		t.rows = append(t.rows, textRow{sub: b, indent: indent})
	}
}

func (t *textBlock) String() string {
	var sb strings.Builder
	t.write(&sb, "")
	return sb.String()
}

func (t *textBlock) write(sb *strings.Builder, indent string) {
	width := 0
	for _, r := range t.rows {
		width = max(width, len(r.label))
	}
	for _, r := range t.rows {
		switch {
		case r.sub != nil:
			r.sub.write(sb, indent+r.indent)
		case r.label != "":
			fmt.Fprintf(sb, "%s%-*s  %s\n", indent, width, r.label, r.value)
		default:
			fmt.Fprintf(sb, "%s%s\n", indent, r.line)
		}
	}
}

// valueShown is how many bytes of a printable value the text output shows.
const valueShown = 64

// showValue renders a holder's value on one line, safe for a terminal:
// printable text as a quoted Go string (its first valueShown bytes and the
// length if longer), anything else as its length and a hex prefix.
func showValue(v []byte) string {
	if printable(v) {
		if len(v) <= valueShown {
			return strconv.Quote(string(v))
		}
		cut := valueShown
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(string(v[:cut])), len(v))
	}
	const hexShown = 16
	s := fmt.Sprintf("%d bytes, hex %x", len(v), v[:min(len(v), hexShown)])
	if len(v) > hexShown {
		s += "..."
	}
	return s
}

// printable reports whether v is UTF-8 text made of printable characters
// and the usual white space (which strconv.Quote shows escaped).
func printable(v []byte) bool {
	if !utf8.Valid(v) {
		return false
	}
	for _, r := range string(v) {
		if !unicode.IsPrint(r) && r != '\t' && r != '\n' && r != '\r' {
			return false
		}
	}
	return true
}

// showLabel renders an owner label: as it is if printable, quoted
// otherwise (so that a label cannot forge lines of the output).
func showLabel(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s) // see showWord
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}
