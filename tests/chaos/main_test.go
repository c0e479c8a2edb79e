package chaos

import (
	"flag"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// Replay and soak settings. The seed comes from -seed, else from
// ASHLOCK_CHAOS_SEED, else from the clock; every run prints it.
var seedFlag = flag.Uint64("seed", 0, "seed of the chaos fault schedules (0: $ASHLOCK_CHAOS_SEED, else random)")

const (
	seedEnv = "ASHLOCK_CHAOS_SEED"
	// soakEnv, set to a duration ("30m"), makes TestChaos inject faults
	// for that long instead of the short default. Give go test a -timeout
	// to match.
	soakEnv = "ASHLOCK_SOAK"
	// defaultFaultFor is TestChaos's fault period without soakEnv: short
	// enough for CI, long enough for dozens of faults of every kind.
	defaultFaultFor = 60 * time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		// A child holder: the test binary re-executed by startChild.
		os.Exit(workerMain())
	}
	goleak.VerifyTestMain(m, etcdtest.IgnoredGoroutines()...)
}

// baseSeed returns the seed of this test binary's runs.
func baseSeed(t *testing.T) uint64 {
	t.Helper()
	if *seedFlag != 0 {
		return *seedFlag
	}
	if s := os.Getenv(seedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

// faultPeriod returns how long TestChaos injects faults.
func faultPeriod(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv(soakEnv)
	if s == "" {
		return defaultFaultFor
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 30m", soakEnv, s)
	}
	return d
}

// verifyNoLeaks checks, after a run has torn everything down, that none of
// its goroutines is left.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	if err := goleak.Find(etcdtest.IgnoredGoroutines()...); err != nil {
		t.Errorf("goroutines left after the run: %v", err)
	}
}
