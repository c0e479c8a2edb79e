package chaos

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// ttl is the lock TTL of every run: etcd's smallest (with default raft
// timing), so that faults bite within seconds.
const ttl = 2 * time.Second

var allFaults = []faultKind{faultLeaderKill, faultPartition, faultBlackhole, faultDelay, faultRevoke, faultFreeze}

// TestChaos runs three holders in this process and three in child
// processes against one lock for a minute of every kind of fault (or
// $ASHLOCK_SOAK), then requires: both histories linearizable against the
// fenced-register model, no update lost, no overlap in the strict mutex
// model, tokens unique and stamps increasing, no claim left, the lock
// working again once the faults stop, and no goroutine left.
func TestChaos(t *testing.T) {
	res := run(t, runConfig{
		name: "chaos", seed: baseSeed(t), faultFor: faultPeriod(t), quiet: 6 * time.Second,
		inProc: 3, children: 3, fencing: true, hold: span{0, 1500 * time.Millisecond},
		prof: profile{kinds: allFaults, ttl: ttl},
	})
	requireClean(t, res)
	for _, k := range allFaults {
		if injected(res, k) == 0 {
			t.Errorf("no %v fault was injected: %v", k, res.faults)
		}
	}
	verifyNoLeaks(t)
}

// TestChaosFencingOffIsCaught is the first negative control: the same
// machinery with the resource's fence turned off and child holders frozen
// between a read and its write must produce a history the checker rejects.
// The register in etcd, guarded by the ownership comparison, must still
// pass in the same run.
func TestChaosFencingOffIsCaught(t *testing.T) {
	res := run(t, runConfig{
		name: "fencing-off", seed: baseSeed(t) + 1, faultFor: 25 * time.Second, quiet: 3 * time.Second,
		inProc: 1, children: 2, fencing: false, hold: span{0, time.Second},
		prof: profile{kinds: []faultKind{faultFreeze}, ttl: ttl, targeted: true},
	})
	if res.resCheck != porcupine.Illegal && res.resLost == 0 {
		t.Errorf("fencing off: the checker found no violation (verdict %s, %d lost updates) in %d SIGSTOP pauses",
			res.resCheck, res.resLost, injected(res, faultFreeze))
	}
	t.Logf("fencing off: verdict %s, %d lost updates (%d acknowledged) over %v",
		res.resCheck, res.resLost, res.resLostAcked, res.faults)
	if res.resViz != "" {
		// The violation was the point; do not leave its picture behind.
		_ = os.Remove(res.resViz)
	}
	if res.regCheck != porcupine.Ok || res.regLost != 0 || len(res.overlaps) != 0 || len(res.leftoverClaims) != 0 || len(res.problems) != 0 {
		t.Errorf("fencing off: the parts that do not depend on the fence failed too: %v", res)
	}
	verifyNoLeaks(t)
}

// TestChaosSessionDoneIsCaught is the second negative control: holders
// that trust an etcd concurrency.Session until its Done channel closes,
// blackholed from etcd while they hold the lock, must be caught by the
// strict mutex model at least once in a few runs. The same schedule with
// ashlock's local deadline must pass. (The fenced workloads stay safe in
// both: fencing does not rely on the mutex.)
func TestChaosSessionDoneIsCaught(t *testing.T) {
	const runs = 3
	seed := baseSeed(t) + 10
	prof := profile{kinds: []faultKind{faultBlackhole}, ttl: ttl, targeted: true}
	// Holders keep the lock for seconds, so that a blackholed holder is
	// still in its critical section when its lease runs out.
	longHolds := span{2500 * time.Millisecond, 4500 * time.Millisecond}
	const quiet = 7 * time.Second // more than a long hold
	caught, total, faults := 0, 0, 0
	var longest time.Duration
	for i := range runs {
		res := run(t, runConfig{
			name: fmt.Sprintf("session-%d", i), seed: seed + uint64(i), faultFor: 12 * time.Second, quiet: quiet,
			inProc: 3, session: true, fencing: true, hold: longHolds, prof: prof,
		})
		faults += injected(res, faultBlackhole)
		total += len(res.overlaps)
		if len(res.overlaps) > 0 {
			caught++
		}
		for _, o := range res.overlaps {
			longest = max(longest, o.by)
			t.Logf("  caught: %v", o)
		}
		if res.regCheck != porcupine.Ok || res.resCheck != porcupine.Ok || res.regLost+res.resLost != 0 {
			t.Errorf("session run %d: the fenced workloads failed: %v", i, res)
		}
	}
	t.Logf("Session.Done control: late poisoning caught in %d of %d runs (%d overlaps over %d blackholes; longest %v)",
		caught, runs, total, faults, longest)
	if caught == 0 {
		t.Errorf("the strict mutex model never caught a Session.Done holder in %d runs", runs)
	}

	res := run(t, runConfig{
		name: "library-same-schedule", seed: seed, faultFor: 12 * time.Second, quiet: quiet,
		inProc: 3, fencing: true, hold: longHolds, prof: prof,
	})
	requireClean(t, res)
	verifyNoLeaks(t)
}

// injected counts the faults of kind k a run injected, in every variant.
func injected(res *runResult, k faultKind) int {
	n := 0
	for name, c := range res.faults {
		if strings.Contains(name, "failed") || strings.Contains(name, "skipped") {
			continue
		}
		if strings.HasPrefix(name, k.String()) || (k == faultLeaderKill && strings.HasPrefix(name, "member-kill")) {
			n += c
		}
	}
	return n
}

// requireClean fails t with every violation the run found.
func requireClean(t *testing.T, res *runResult) {
	t.Helper()
	if res.regCheck != porcupine.Ok {
		t.Errorf("register history: %s (visualization: %s)", res.regCheck, res.regViz)
	}
	if res.resCheck != porcupine.Ok {
		t.Errorf("resource history: %s (visualization: %s)", res.resCheck, res.resViz)
	}
	if res.regLost+res.resLost != 0 {
		t.Errorf("lost updates: register %d (%d acknowledged), resource %d (%d acknowledged)",
			res.regLost, res.regLostAcked, res.resLost, res.resLostAcked)
	}
	for i, o := range res.overlaps {
		if i == 10 {
			t.Errorf("... and %d more overlaps", len(res.overlaps)-10)
			break
		}
		t.Errorf("strict mutex model: %v", o)
	}
	if res.doneButValid != 0 {
		t.Errorf("%d checks found FencingToken succeeding after Done closed", res.doneButValid)
	}
	if len(res.leftoverClaims) != 0 {
		t.Errorf("claims left under the prefix: %q", res.leftoverClaims)
	}
	for _, p := range res.problems {
		t.Error(p)
	}
}
