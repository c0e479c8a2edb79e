package chaos

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
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
	// go-redis logs every failed dial, which Redis's faults make by the
	// hundred; what they cost shows in the checks.
	goredis.SetLogger(&logging.VoidLogger{})
	if os.Getenv(workerEnv) != "" {
		// A child holder: the test binary re-executed by startChild.
		os.Exit(workerMain())
	}
	goleak.VerifyTestMain(m, etcdtest.IgnoredGoroutines()...)
}

// The base seed, drawn once per test binary, so that every test's replay
// command (which gives the base) draws that test's schedules again.
var (
	baseOnce sync.Once
	base     uint64
	baseErr  error
)

// baseSeed returns the seed of this test binary's runs; each test adds an
// offset of its own.
func baseSeed(t *testing.T) uint64 {
	t.Helper()
	baseOnce.Do(func() {
		switch s := os.Getenv(seedEnv); {
		case *seedFlag != 0:
			base = *seedFlag
		case s != "":
			if base, baseErr = strconv.ParseUint(s, 10, 64); baseErr != nil {
				baseErr = fmt.Errorf("%s=%q: %w", seedEnv, s, baseErr)
			}
		default:
			base = uint64(time.Now().UnixNano())
		}
	})
	if baseErr != nil {
		t.Fatal(baseErr)
	}
	return base
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
