package backendtest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/backendtest"
	"github.com/ash-lock/ashlock/backend/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// backendEnv selects, in a child process, which broken backend TestSuite
// runs the suite against.
const backendEnv = "BACKENDTEST_SELFTEST_BROKEN"

// TestSuite runs the suite against a correct memory backend, which must
// pass. When backendEnv names a broken backend (only in the child processes
// of TestSuiteCatchesBrokenBackends) it runs against that one instead, and
// is expected to fail.
func TestSuite(t *testing.T) {
	newBackend := func(*testing.T) backend.Backend { return memory.New() }
	if name := os.Getenv(backendEnv); name != "" {
		b, ok := brokenBackends[name]
		if !ok {
			t.Fatalf("%s=%q names no broken backend", backendEnv, name)
		}
		newBackend = func(*testing.T) backend.Backend { return b.make() }
	}
	backendtest.Run(t, newBackend)
}

// TestSuiteCatchesBrokenBackends proves the suite can fail. Run takes a
// *testing.T, whose failures cannot be caught in-process without failing
// this test too, so each broken backend gets the suite in a child process:
// this test binary re-run with -test.run=^TestSuite$ and backendEnv set.
// The child must exit non-zero, report the subtests that check the broken
// guarantee as failed, and not panic or hit the test timeout: the suite
// reports a bad backend, it does not crash or hang on one.
func TestSuiteCatchesBrokenBackends(t *testing.T) {
	names := make([]string, 0, len(brokenBackends))
	for name := range brokenBackends {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			// The children mostly sit out timeouts; run them side by side.
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSuite$", "-test.count=1", "-test.timeout=90s")
			// A short timeout keeps cheap the waits that a broken backend
			// makes run out (a waiter that never shows up in Inspect). The
			// failures asserted below do not depend on timing, so a slow
			// machine can only add failures, never hide one.
			cmd.Env = append(os.Environ(), backendEnv+"="+name, backendtest.TimeoutEnv+"=500ms")
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("suite against %s: %v, want a failing exit\n%s", name, err, out)
			}
			text := string(out)
			for _, sub := range brokenBackends[name].mustFail {
				if !strings.Contains(text, "--- FAIL: TestSuite/"+sub+" ") {
					t.Errorf("suite against %s did not fail %s", name, sub)
				}
			}
			for _, bad := range []string{"panic:", "test timed out"} {
				if strings.Contains(text, bad) {
					t.Errorf("suite against %s printed %q", name, bad)
				}
			}
			if t.Failed() {
				t.Logf("child output:\n%s", out)
			}
		})
	}
}
