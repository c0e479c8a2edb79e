//go:build unix

package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runDetached runs ashlock to the end without touching t, for use from
// several goroutines, and returns its exit code and stderr.
func runDetached(args ...string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return 0, stderr.String(), fmt.Errorf("ashlock %q did not exit within %v", args, waitBound)
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		return 0, stderr.String(), err
	}
	return cmd.ProcessState.ExitCode(), stderr.String(), nil
}

func TestRunsOfOneKeyNeverOverlap(t *testing.T) {
	seed, _ := seedFor(t)
	journal := filepath.Join(t.TempDir(), "journal")
	// Each command notes its start and end, with its token, in a file
	// opened for appending (">>": O_APPEND), so that lines are never
	// interleaved mid-line. The pause widens the window for an overlap.
	script := `echo "start $ASHLOCK_FENCING_TOKEN" >> "$1"; sleep 0.1; echo "end $ASHLOCK_FENCING_TOKEN" >> "$1"`
	const workers, runsEach = 3, 3
	var wg sync.WaitGroup
	errs := make(chan error, workers*runsEach)
	for w := range workers {
		wg.Go(func() {
			for range runsEach {
				code, stderr, err := runDetached("run", "--seed", seed, "--owner", fmt.Sprintf("worker-%d", w),
					"nightly", "--", "sh", "-c", script, "sh", journal)
				switch {
				case err != nil:
					errs <- err
				case code != 0:
					errs <- fmt.Errorf("worker %d: exit code %d; stderr %q", w, code, stderr)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	data, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2*workers*runsEach {
		t.Fatalf("journal has %d lines, want %d:\n%s", len(lines), 2*workers*runsEach, data)
	}
	var last uint64
	for i := 0; i < len(lines); i += 2 {
		startTok, okStart := strings.CutPrefix(lines[i], "start ")
		endTok, okEnd := strings.CutPrefix(lines[i+1], "end ")
		if !okStart || !okEnd || startTok != endTok {
			t.Fatalf("lines %d-%d are %q, %q: want a start and the end of the same run (runs overlapped):\n%s",
				i+1, i+2, lines[i], lines[i+1], data)
		}
		token, err := strconv.ParseUint(startTok, 10, 64)
		if err != nil {
			t.Fatalf("line %d: token %q: %v", i+1, startTok, err)
		}
		if token <= last {
			t.Errorf("run %d has token %d after %d: not strictly increasing", i/2+1, token, last)
		}
		last = token
	}
}

func TestTryOnAHeldKeyGivesUpAtOnce(t *testing.T) {
	seed, _ := seedFor(t)
	holdKey(t, seed, "nightly")
	marker := filepath.Join(t.TempDir(), "ran")
	code, stderr := run(t, "run", "--seed", seed, "--try", "nightly", "--", "touch", marker)
	if code != exitNotAcquired {
		t.Errorf("exit code = %d, want %d; stderr %q", code, exitNotAcquired, stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran although the key was held")
	}
	if info := inspect(t, seed, "nightly"); info.Owner != "test-holder" || len(info.Waiters) != 0 {
		t.Errorf("after --try the key shows %+v, want the holder alone", info)
	}
}

func TestTimeoutGivesUp(t *testing.T) {
	seed, _ := seedFor(t)
	holdKey(t, seed, "nightly")
	code, stderr := run(t, "run", "--seed", seed, "--timeout", "300ms", "nightly", "--", "true")
	if code != exitNotAcquired {
		t.Errorf("exit code = %d, want %d; stderr %q", code, exitNotAcquired, stderr)
	}
	if info := inspect(t, seed, "nightly"); len(info.Waiters) != 0 {
		t.Errorf("the timed-out run left its claim queued: %+v", info.Waiters)
	}
}

func TestSignalWhileWaitingWithdraws(t *testing.T) {
	seed, _ := seedFor(t)
	holdKey(t, seed, "nightly")
	marker := filepath.Join(t.TempDir(), "ran")
	p := start(t, "run", "--seed", seed, "--owner", "waiter", "nightly", "--", "touch", marker)
	eventually(t, "the run to queue", func() bool { return len(inspect(t, seed, "nightly").Waiters) == 1 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != exitNotAcquired {
		t.Errorf("exit code = %d, want %d; stderr %q", code, exitNotAcquired, p.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran although the wait was cancelled")
	}
	if info := inspect(t, seed, "nightly"); len(info.Waiters) != 0 {
		t.Errorf("the cancelled run left its claim queued: %+v", info.Waiters)
	}
}

func TestInspectShowsHolderAndWaiters(t *testing.T) {
	seed, _ := seedFor(t)
	// The holder's command runs until the test closes its stdin.
	holder := start(t, "run", "--seed", seed, "--owner", "holder", "nightly", "--", "sh", "-c", "echo ready; read line; exit 0")
	holder.waitLine(t, "ready")
	var waiters []*proc
	for i, owner := range []string{"waiter-1", "waiter-2"} {
		waiters = append(waiters, start(t, "run", "--seed", seed, "--owner", owner, "nightly", "--", "true"))
		eventually(t, owner+" to queue", func() bool { return len(inspect(t, seed, "nightly").Waiters) == i+1 })
	}

	p := start(t, "inspect", "--seed", seed, "--json", "nightly")
	var out strings.Builder
	for l := range p.lines {
		out.WriteString(l)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("inspect exit code = %d; stderr %q", code, p.stderr)
	}
	var got struct {
		Held    bool   `json:"held"`
		Owner   string `json:"owner"`
		Token   uint64 `json:"token"`
		Waiters []struct {
			Owner string `json:"owner"`
			Token uint64 `json:"token"`
		} `json:"waiters"`
	}
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("inspect --json printed %q: %v", out.String(), err)
	}
	if !got.Held || got.Owner != "holder" || got.Token == 0 {
		t.Errorf("inspect shows %+v, want nightly held by holder", got)
	}
	if len(got.Waiters) != 2 || got.Waiters[0].Owner != "waiter-1" || got.Waiters[1].Owner != "waiter-2" ||
		!(got.Token < got.Waiters[0].Token && got.Waiters[0].Token < got.Waiters[1].Token) {
		t.Errorf("waiters = %+v, want waiter-1 then waiter-2, tokens above the holder's %d", got.Waiters, got.Token)
	}

	// Let everyone finish: the holder, then the waiters in turn.
	if err := holder.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	for i, p := range append([]*proc{holder}, waiters...) {
		if code := p.wait(t); code != 0 {
			t.Errorf("run %d: exit code = %d; stderr %q", i, code, p.stderr)
		}
	}
}

func TestLeaseRevokedStopsTheCommand(t *testing.T) {
	tests := []struct {
		name   string
		script string // gets the marker path as $1
	}{
		{"command exits on SIGTERM", `trap 'echo term > "$1"; exit 0' TERM
echo pid=$$
sleep 60 </dev/null >/dev/null 2>&1 &
wait`},
		// The shell runs a trap only between commands, so it waits on a
		// background sleep: wait returns at once on a signal, whereas a
		// foreground sleep would hold the trap back past the SIGKILL.
		{"command ignores SIGTERM and is killed", `trap 'echo term > "$1"' TERM
echo pid=$$
while :; do sleep 60 </dev/null >/dev/null 2>&1 & wait; done`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seed, prefix := seedFor(t)
			cli := shared.Client(t, nil)
			marker := filepath.Join(t.TempDir(), "terminated")
			p := start(t, "run", "--seed", seed, "--ttl", "3s", "nightly", "--", "sh", "-c", tt.script, "sh", marker)
			pid, err := strconv.Atoi(strings.TrimPrefix(p.waitLine(t, "pid="), "pid="))
			if err != nil {
				t.Fatal(err)
			}
			if n := revokeClaims(t, cli, prefix); n != 1 {
				t.Fatalf("revoked %d leases, want the holder's one", n)
			}
			if code := p.wait(t); code != exitLockLost {
				t.Errorf("exit code = %d, want %d; stderr %q", code, exitLockLost, p.stderr)
			}
			if data, err := os.ReadFile(marker); err != nil || string(data) != "term\n" {
				t.Errorf("the command did not get SIGTERM (marker: %q, %v)", data, err)
			}
			eventually(t, "the command to be gone", func() bool { return processGone(pid) })
		})
	}
}

// A lease lost while ashlock's stderr is a pipe nobody reads any more (a
// log shipper that died, "2>&1 | head") still stops the command's whole
// group: the messages about the loss cannot be written, and that must not
// end ashlock before it has signalled the group.
func TestLeaseRevokedStopsTheCommandWithStderrGone(t *testing.T) {
	seed, prefix := seedFor(t)
	cli := shared.Client(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "--seed", seed, "--ttl", "3s", "nightly", "--",
		"sh", "-c", `sleep 60 </dev/null >/dev/null 2>&1 & echo straggler=$!; wait`)
	out, outW, err := os.Pipe()
	require.NoError(t, err)
	errR, errW, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = outW, errW
	require.NoError(t, cmd.Start())
	outW.Close()
	errW.Close()
	errR.Close() // every write to stderr from now on fails with EPIPE
	t.Cleanup(func() { _ = cmd.Wait() })

	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "straggler=")))
	require.NoError(t, err, "line %q", line)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	require.Equal(t, 1, revokeClaims(t, cli, prefix), "leases revoked")

	eventually(t, "the command's background process to be gone", func() bool { return processGone(pid) })
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, exitLockLost, exit.ExitCode(), "ashlock's exit (-1: killed by a signal)")
}
