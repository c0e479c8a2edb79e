package chaos

import (
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// pgFaults are the faults of a run on PostgreSQL: the server's (an
// immediate shutdown and restart, a SIGSTOP of every server process),
// pg_terminate_backend of one holder's connections, a blackhole between
// one holder and the server, an operator's DELETE of a child's lease row,
// and SIGSTOP of a child holder.
var pgFaults = []faultKind{faultServerRestart, faultServerPause, faultBlackhole, faultTerminate, faultRevoke, faultFreeze}

// pgFaultFor is TestChaosPostgres's fault period without soakEnv: shorter
// than TestChaos's, to keep the package's run short, and still long
// enough for several faults of every kind.
const pgFaultFor = 40 * time.Second

// TestChaosPostgres is TestChaos on PostgreSQL: the same four workloads,
// holders and checks, with the mutex workload's register kept in a
// PostgreSQL table and written only in transactions that passed the
// Backend's Fence, under PostgreSQL's faults (pgFaults) for 40 s (or
// $ASHLOCK_SOAK).
func TestChaosPostgres(t *testing.T) {
	faultFor := pgFaultFor
	if os.Getenv(soakEnv) != "" {
		faultFor = faultPeriod(t)
	}
	res := run(t, runConfig{
		name: "chaos-postgres", store: storePostgres, seed: baseSeed(t) + 30, faultFor: faultFor, quiet: 6 * time.Second,
		inProc: 3, children: 3, fencing: true, hold: span{0, 1500 * time.Millisecond},
		prof:     profile{kinds: pgFaults, ttl: ttl},
		permits:  group{inProc: 4, children: 1},
		transfer: group{inProc: 2, children: 1}, accounts: 6,
		election: 3,
	})
	requireClean(t, res)
	for _, k := range pgFaults {
		if injected(res, k) == 0 {
			t.Errorf("no %v fault was injected: %v", k, res.faults)
		}
	}
	verifyNoLeaks(t)
}

// TestChaosPostgresFencingOffIsCaught is TestChaosFencingOffIsCaught on
// PostgreSQL: the resource's fence off, the children's register
// transactions without the Backend's Fence, and child holders frozen
// between a read and its write. Porcupine must find both histories
// Illegal and the lost-update check must find late writes in both
// records; the checks that do not depend on the fences must pass.
func TestChaosPostgresFencingOffIsCaught(t *testing.T) {
	res := run(t, runConfig{
		name: "postgres-fencing-off", store: storePostgres, seed: baseSeed(t) + 31, faultFor: 20 * time.Second, quiet: 3 * time.Second,
		inProc: 1, children: 2, fencing: false, unguarded: true, hold: span{0, time.Second},
		prof: profile{kinds: []faultKind{faultFreeze}, ttl: ttl, targeted: true},
	})
	requireFencingOffCaught(t, res, "the PostgreSQL table")
	verifyNoLeaks(t)
}

// requireFencingOffCaught fails t unless the mutex workload's checks
// caught the late writes of a run with fencing off (in the resource) and
// unguarded registers (in the store's table or key, where), and the
// checks that do not depend on them passed.
func requireFencingOffCaught(t *testing.T, res *runResult, where string) {
	t.Helper()
	t.Logf("fencing off: resource %s, %d lost updates (%d acknowledged); unguarded register %s, %d lost updates (%d acknowledged); over %v",
		res.resCheck, res.resLost, res.resLostAcked, res.regCheck, res.regLost, res.regLostAcked, res.faults)
	if res.resCheck != porcupine.Illegal {
		t.Errorf("fencing off: porcupine did not find the resource's history Illegal (%s) in %d SIGSTOP pauses",
			res.resCheck, injected(res, faultFreeze))
	}
	if res.resLost == 0 {
		t.Errorf("fencing off: no lost update found in the resource's record in %d SIGSTOP pauses", injected(res, faultFreeze))
	}
	if res.regCheck != porcupine.Illegal {
		t.Errorf("unguarded register: porcupine did not find the register's history Illegal (%s) in %d SIGSTOP pauses",
			res.regCheck, injected(res, faultFreeze))
	}
	if res.regLost == 0 {
		t.Errorf("unguarded register: no lost update found in %s's record in %d SIGSTOP pauses", where, injected(res, faultFreeze))
	}
	for _, v := range []string{res.resViz, res.regViz} {
		if v != "" {
			_ = os.Remove(v) // the violation was the point
		}
	}
	if len(res.overlaps) != 0 || len(res.leftoverClaims) != 0 || len(res.problems) != 0 {
		t.Errorf("fencing off: the parts that do not depend on the fence failed too: %v", res)
	}
}
