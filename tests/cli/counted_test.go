//go:build unix

package cli_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// exitUsage is ashlock's exit code for a bad invocation, a permit count
// that differs from the key's other runs included.
const exitUsage = 64

// holdScript prints "in PERMIT TOKEN" and runs until its stdin closes.
const holdScript = `echo "in $ASHLOCK_PERMIT $ASHLOCK_FENCING_TOKEN"; read line || :`

// holding waits for p's holdScript to start and returns its permit and
// token.
func holding(t *testing.T, p *proc) (permit int, token uint64) {
	t.Helper()
	l := p.waitLine(t, "in ")
	if _, err := fmt.Sscanf(l, "in %d %d", &permit, &token); err != nil {
		t.Fatalf("command printed %q: %v", l, err)
	}
	return permit, token
}

// inspected is the part of "ashlock inspect --json" these tests read.
type inspected struct {
	Permits int `json:"permits"`
	Holders []struct {
		Owner  string `json:"owner"`
		Token  uint64 `json:"token"`
		Permit int    `json:"permit"`
		Shared bool   `json:"shared"`
		Value  []byte `json:"value"`
	} `json:"holders"`
}

// inspectJSON runs "ashlock inspect --json" and decodes its output.
func inspectJSON(t *testing.T, seed, key string) (out inspected) {
	t.Helper()
	p := start(t, "inspect", "--seed", seed, "--json", key)
	var text strings.Builder
	for l := range p.lines {
		text.WriteString(l)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("inspect exit code = %d; stderr %q", code, p.stderr)
	}
	if err := json.Unmarshal([]byte(text.String()), &out); err != nil {
		t.Fatalf("inspect --json printed %q: %v", text.String(), err)
	}
	return out
}

// The cron example of "ashlock run --help": at most 3 backups at once,
// across processes, each with a permit of its own.
func TestPermitsLetThreeRunsHold(t *testing.T) {
	seed, _ := seedFor(t)
	var runs []*proc
	permits := map[int]string{}
	for i := range 3 {
		owner := fmt.Sprintf("backup-%d", i)
		p := start(t, "run", "--seed", seed, "--permits", "3", "--owner", owner, "--value", "disk of "+owner,
			"backups", "--", "sh", "-c", holdScript)
		permit, _ := holding(t, p)
		if other, dup := permits[permit]; dup {
			t.Errorf("%s and %s both got permit %d", other, owner, permit)
		}
		permits[permit] = owner
		runs = append(runs, p)
	}
	if got := slices.Sorted(maps.Keys(permits)); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("permits %v, want 0, 1, 2", got)
	}

	info := inspectJSON(t, seed, "backups")
	if info.Permits != 3 || len(info.Holders) != 3 {
		t.Fatalf("inspect shows %d permits, holders %+v; want 3 and 3", info.Permits, info.Holders)
	}
	for _, h := range info.Holders {
		if permits[h.Permit] != h.Owner || string(h.Value) != "disk of "+h.Owner || h.Shared {
			t.Errorf("holder %+v, want %s with permit %d and its value", h, permits[h.Permit], h.Permit)
		}
	}

	// A fourth backup finds all permits taken; a run with another count
	// is told it does not match.
	if code, stderr := run(t, "run", "--seed", seed, "--permits", "3", "--try", "backups", "--", "true"); code != exitNotAcquired {
		t.Errorf("fourth run: exit code = %d, want %d; stderr %q", code, exitNotAcquired, stderr)
	}
	if code, stderr := run(t, "run", "--seed", seed, "--permits", "4", "--try", "backups", "--", "true"); code != exitUsage ||
		!strings.Contains(stderr, "use 3 permits") {
		t.Errorf("run with --permits 4: exit code = %d, want %d; stderr %q, want it to name the 3 permits", code, exitUsage, stderr)
	}

	for i, p := range runs {
		if err := p.stdin.Close(); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t); code != 0 {
			t.Errorf("run %d: exit code = %d; stderr %q", i, code, p.stderr)
		}
	}
}

func TestSharedRunsHoldTogether(t *testing.T) {
	seed, _ := seedFor(t)
	var runs []*proc
	for _, owner := range []string{"reader-1", "reader-2"} {
		p := start(t, "run", "--seed", seed, "--shared", "--owner", owner, "db", "--", "sh", "-c", holdScript)
		if permit, _ := holding(t, p); permit != 0 {
			t.Errorf("%s: ASHLOCK_PERMIT = %d, want 0", owner, permit)
		}
		runs = append(runs, p)
	}
	info := inspectJSON(t, seed, "db")
	if len(info.Holders) != 2 || !info.Holders[0].Shared || !info.Holders[1].Shared {
		t.Errorf("inspect shows holders %+v, want two shared", info.Holders)
	}
	if code, stderr := run(t, "run", "--seed", seed, "--try", "db", "--", "true"); code != exitNotAcquired {
		t.Errorf("plain run beside the readers: exit code = %d, want %d; stderr %q", code, exitNotAcquired, stderr)
	}
	for i, p := range runs {
		if err := p.stdin.Close(); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t); code != 0 {
			t.Errorf("run %d: exit code = %d; stderr %q", i, code, p.stderr)
		}
	}
}
