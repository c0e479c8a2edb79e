//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ash-lock/ashlock"
)

// observedLines waits until observe has printed at least n lines and
// returns them all.
func observedLines(t *testing.T, f *fixture, n int) []string {
	t.Helper()
	eventually(t, fmt.Sprintf("%d lines of output; have %q", n, f.stdout), func() bool {
		return strings.Count(f.stdout.String(), "\n") >= n
	})
	return strings.Split(strings.TrimSuffix(f.stdout.String(), "\n"), "\n")
}

// campaign makes the test's client lead election name as owner,
// publishing value, and returns the guard and its term.
func campaign(t *testing.T, c *ashlock.LockClient, name, owner string, value []byte) (*ashlock.Guard, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	g, err := c.Election(name).WithOwner(owner).Campaign(ctx, value)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runtime.KeepAlive(g) })
	term, err := g.FencingToken()
	if err != nil {
		t.Fatal(err)
	}
	return g, term
}

// splitObserved checks that line starts with an observation time no
// earlier than prev and returns that time and the rest of the line.
func splitObserved(t *testing.T, line string, prev time.Time) (time.Time, string) {
	t.Helper()
	stamp, rest, ok := strings.Cut(line, " ")
	if !ok {
		t.Fatalf("line %q has no time", line)
	}
	at, err := time.Parse(observedTime, stamp)
	if err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	if at.Before(prev) {
		t.Errorf("line %q observed before the line above it (%v)", line, prev)
	}
	return at, rest
}

// The text output shows "no leader" first, then every change in order:
// a term, its value changing, a resignation, a term lost to its lease's
// end. USR1 does not end observe; TERM ends it with status 0.
func TestObserveFollowsEveryChange(t *testing.T) {
	f := newFixture(t)
	codec := f.start("observe", "scheduler")
	observedLines(t, f, 1)
	f.sigs <- syscall.SIGUSR1 // dropped

	ctx := t.Context()
	g, term1 := campaign(t, f.client, "scheduler", "node-1", []byte("10.0.0.1:8080"))
	observedLines(t, f, 2)
	if err := g.SetValue(ctx, []byte("10.0.0.1:9090")); err != nil {
		t.Fatal(err)
	}
	observedLines(t, f, 3)
	if err := g.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	observedLines(t, f, 4)
	other := f.connect(t)
	g2, term2 := campaign(t, other, "scheduler", "node-2", nil)
	observedLines(t, f, 5)
	if !f.backend.ExpireKey("scheduler") {
		t.Fatal("ExpireKey found no holder")
	}
	<-g2.Done()
	observedLines(t, f, 6)

	f.sigs <- syscall.SIGTERM
	if code := f.wait(codec); code != exitOK {
		t.Fatalf("exit code = %d, want 0; stderr %q", code, f.stderr)
	}
	if f.stderr.String() != "" {
		t.Errorf("stderr = %q, want nothing", f.stderr)
	}
	if term2 <= term1 {
		t.Fatalf("terms %d then %d", term1, term2)
	}
	want := []string{
		"no leader",
		fmt.Sprintf(`leader owner=node-1 token=%d since=* value="10.0.0.1:8080"`, term1),
		fmt.Sprintf(`leader owner=node-1 token=%d since=* value="10.0.0.1:9090"`, term1),
		"no leader",
		fmt.Sprintf(`leader owner=node-2 token=%d since=*`, term2),
		"no leader",
	}
	lines := strings.Split(strings.TrimSuffix(f.stdout.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), f.stdout)
	}
	var prev time.Time
	for i, line := range lines {
		var rest string
		prev, rest = splitObserved(t, line, prev)
		// since=TIME: a valid time, compared as "*".
		rest = sinceField.ReplaceAllStringFunc(rest, func(m string) string {
			if _, err := time.Parse(observedTime, strings.TrimPrefix(m, "since=")); err != nil {
				t.Errorf("line %d: %v", i+1, err)
			}
			return "since=*"
		})
		if rest != want[i] {
			t.Errorf("line %d = %q, want %q", i+1, rest, want[i])
		}
	}
}

var sinceField = regexp.MustCompile(`since=[^ ]+`)

// --json prints one object per line: the current leader first (here a
// leader that Run made, with a value that is not text), then "no leader"
// once Run ends; INT ends observe with status 0.
func TestObserveJSON(t *testing.T) {
	f := newFixture(t)
	value := []byte{0, 1, 0xfe, 0xff, '\n'}
	runCtx, stopRun := context.WithCancel(t.Context())
	leading := make(chan uint64, 1)
	runErr := make(chan error, 1)
	go func() {
		runErr <- f.client.Election("compactor").WithOwner("node-1").Run(runCtx, value,
			func(ctx context.Context, term uint64) error {
				leading <- term
				<-ctx.Done()
				return nil
			})
	}()
	var term uint64
	select {
	case term = <-leading:
	case <-time.After(testTimeout):
		t.Fatal("Run never led")
	}

	codec := f.start("observe", "--json", "compactor")
	observedLines(t, f, 1)
	stopRun()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	lines := observedLines(t, f, 2)
	f.sigs <- syscall.SIGINT
	if code := f.wait(codec); code != exitOK {
		t.Fatalf("exit code = %d, want 0; stderr %q", code, f.stderr)
	}
	if f.stderr.String() != "" {
		t.Errorf("stderr = %q, want nothing", f.stderr)
	}
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), f.stdout)
	}

	var lead leaderJSON
	if err := json.Unmarshal([]byte(lines[0]), &lead); err != nil {
		t.Fatalf("line 1 is not JSON: %v\n%s", err, lines[0])
	}
	if lead.Name != "compactor" || !lead.Leader || lead.Owner != "node-1" || lead.Token != term ||
		string(lead.Value) != string(value) || lead.Since == nil || lead.ObservedAt.IsZero() {
		t.Errorf("line 1 = %+v, want compactor led by node-1 in term %d with value %q", lead, term, value)
	}

	var none map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &none); err != nil {
		t.Fatalf("line 2 is not JSON: %v\n%s", err, lines[1])
	}
	if none["name"] != "compactor" || none["leader"] != false {
		t.Errorf("line 2 = %v, want compactor without a leader", none)
	}
	for _, absent := range []string{"owner", "token", "value", "since"} {
		if _, ok := none[absent]; ok {
			t.Errorf("line 2 has %q without a leader: %v", absent, none)
		}
	}
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(none["observed_at"]))
	if err != nil || at.Before(lead.ObservedAt) {
		t.Errorf("line 2's observed_at = %v (%v), want a time after line 1's %v", none["observed_at"], err, lead.ObservedAt)
	}
}

// A leader already in place is the first line.
func TestObserveStartsWithTheCurrentLeader(t *testing.T) {
	f := newFixture(t)
	_, term := campaign(t, f.client, "api", "node-1", []byte("v"))
	codec := f.start("observe", "api")
	lines := observedLines(t, f, 1)
	f.sigs <- syscall.SIGINT
	if code := f.wait(codec); code != exitOK {
		t.Fatalf("exit code = %d, want 0; stderr %q", code, f.stderr)
	}
	_, rest := splitObserved(t, lines[0], time.Time{})
	if want := fmt.Sprintf("leader owner=node-1 token=%d since=", term); !strings.HasPrefix(rest, want) ||
		!strings.HasSuffix(rest, ` value="v"`) {
		t.Errorf("first line = %q, want %q... value=\"v\"", rest, want)
	}
}

func TestWriteLeaderTextIsSafe(t *testing.T) {
	at := time.Date(2026, 12, 1, 17, 25, 0, 123456789, time.FixedZone("CET", 3600))
	since := time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		l    ashlock.Leader
		want string
	}{
		{"no leader", ashlock.Leader{Name: "e"}, "2026-12-01T16:25:00.123Z no leader\n"},
		{"text", ashlock.Leader{Name: "e", Owner: "host:1", Token: 7, Since: since, Value: []byte("a b")},
			`2026-12-01T16:25:00.123Z leader owner=host:1 token=7 since=2026-12-01T16:00:00.000Z value="a b"` + "\n"},
		{"no value", ashlock.Leader{Name: "e", Owner: "host:1", Token: 7, Since: since},
			"2026-12-01T16:25:00.123Z leader owner=host:1 token=7 since=2026-12-01T16:00:00.000Z\n"},
		{"lines in the value and the label", ashlock.Leader{Name: "e", Owner: "a\nb", Token: 7, Since: since, Value: []byte("x\ny")},
			`2026-12-01T16:25:00.123Z leader owner="a\nb" token=7 since=2026-12-01T16:00:00.000Z value="x\ny"` + "\n"},
		{"a label with spaces and quotes", ashlock.Leader{Owner: `my "host" 1`, Token: 7},
			`2026-12-01T16:25:00.123Z leader owner="my \"host\" 1" token=7` + "\n"},
		{"an empty label", ashlock.Leader{Token: 7}, `2026-12-01T16:25:00.123Z leader owner="" token=7` + "\n"},
		{"a label that is not UTF-8", ashlock.Leader{Owner: "a\xff\x9b2J", Token: 7},
			`2026-12-01T16:25:00.123Z leader owner="a\xff\x9b2J" token=7` + "\n"},
		{"binary value", ashlock.Leader{Owner: "o", Token: 7, Value: []byte{0, 0xff, 0x1b}},
			"2026-12-01T16:25:00.123Z leader owner=o token=7 value=3 bytes, hex 00ff1b\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := writeLeaderText(&b, tt.l, at); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got  %q\nwant %q", b.String(), tt.want)
			}
		})
	}
}

func TestObserveUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"no key", []string{"observe"}},
		{"two keys", []string{"observe", "a", "b"}},
		{"flag after key", []string{"observe", "a", "--json"}},
		{"unknown flag", []string{"observe", "--bogus", "a"}},
		{"bad connect timeout", []string{"observe", "--connect-timeout", "0s", "a"}},
		{"invalid key", []string{"observe", "a\x7f"}},
		{"bad seed", []string{"observe", "--seed", "nope://", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if code := f.run(tt.args...); code != exitUsage {
				t.Errorf("exit code = %d, want %d; stderr %q", code, exitUsage, f.stderr)
			}
			if f.stderr.String() == "" {
				t.Error("no message on stderr")
			}
			if f.stdout.String() != "" {
				t.Errorf("stdout = %q, want nothing", f.stdout)
			}
		})
	}
}

// A backend that closes under observe ends it with 69 and a message.
func TestObserveBackendClosed(t *testing.T) {
	f := newFixture(t)
	codec := f.start("observe", "e")
	observedLines(t, f, 1)
	if err := f.backend.Close(); err != nil {
		t.Fatal(err)
	}
	if code := f.wait(codec); code != exitUnavailable {
		t.Errorf("exit code = %d, want %d; stderr %q", code, exitUnavailable, f.stderr)
	}
	if !strings.Contains(f.stderr.String(), `ashlock: observing "e": `) || !strings.Contains(f.stderr.String(), "closed") {
		t.Errorf("stderr = %q, want it to say the backend closed", f.stderr)
	}
}

func TestObserveExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"unavailable", fmt.Errorf("observing: %w", ashlock.ErrUnavailable), exitUnavailable},
		{"closed", fmt.Errorf("observing: %w", ashlock.ErrClosed), exitUnavailable},
		{"connect timed out", context.DeadlineExceeded, exitUnavailable},
		{"invalid key", ashlock.ErrInvalidKey, exitUsage},
		{"invalid seed", ashlock.ErrInvalidConfig, exitUsage},
		{"unsupported", errors.ErrUnsupported, exitSoftware},
		{"write failed", &writeError{errors.New("disk full")}, exitSoftware},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := observeExitCode(tt.err); got != tt.want {
				t.Errorf("observeExitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

// The real process ends with status 0 on a real INT or TERM, after
// printing the current state (memory://: nobody leads).
func TestBinaryObserveEndsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run("SIG"+signalName(sig), func(t *testing.T) {
			unignore(t, sig)
			cmd, lines := startBinary(t, "observe", "job")
			if line := nextLine(t, lines, ""); !strings.HasSuffix(line, " no leader") {
				t.Fatalf("first line = %q, want no leader", line)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := waitExit(t, cmd); code != exitOK {
				t.Errorf("exit code = %d, want 0", code)
			}
		})
	}
}
