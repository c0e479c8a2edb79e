//go:build unix

package cli_test

import (
	"encoding/json"
	"syscall"
	"testing"
)

// observedState is one line of "ashlock observe --json".
type observedState struct {
	Name   string `json:"name"`
	Leader bool   `json:"leader"`
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	Value  []byte `json:"value"`
}

// nextState reads the next line of an "ashlock observe --json".
func nextState(t *testing.T, p *proc) observedState {
	t.Helper()
	l := p.waitLine(t, "{")
	var s observedState
	if err := json.Unmarshal([]byte(l), &s); err != nil {
		t.Fatalf("observe --json printed %q: %v", l, err)
	}
	return s
}

// An "ashlock run --value" leads the election named by its key while its
// command runs: "ashlock observe --json", another process, shows nobody,
// then that run with its token and value, then nobody once the run ends;
// INT ends observe with status 0.
func TestObserveFollowsARun(t *testing.T) {
	seed, _ := seedFor(t)
	observer := start(t, "observe", "--seed", seed, "--json", "scheduler")
	if s := nextState(t, observer); s.Name != "scheduler" || s.Leader {
		t.Fatalf("first state = %+v, want scheduler without a leader", s)
	}

	leader := start(t, "run", "--seed", seed, "--owner", "node-1", "--value", "10.0.0.1:8080",
		"scheduler", "--", "sh", "-c", holdScript)
	_, token := holding(t, leader)
	if s := nextState(t, observer); !s.Leader || s.Owner != "node-1" || s.Token != token || string(s.Value) != "10.0.0.1:8080" {
		t.Errorf("state = %+v, want node-1 leading in term %d with value 10.0.0.1:8080", s, token)
	}

	if err := leader.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if code := leader.wait(t); code != 0 {
		t.Errorf("run exit code = %d; stderr %q", code, leader.stderr)
	}
	if s := nextState(t, observer); s.Leader || s.Token != 0 {
		t.Errorf("state after the run = %+v, want no leader", s)
	}

	if err := observer.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := observer.wait(t); code != 0 {
		t.Errorf("observe exit code = %d, want 0; stderr %q", code, observer.stderr)
	}
	if observer.stderr.Len() != 0 {
		t.Errorf("observe stderr = %q, want nothing", observer.stderr)
	}
}
