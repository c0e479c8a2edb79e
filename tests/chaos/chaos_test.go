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

// TestChaos runs four workloads side by side for a minute of every kind
// of fault (or $ASHLOCK_SOAK): three holders in this process and three in
// child processes on one lock (the mutex workload), five on a counted lock
// of three permits, three moving money between accounts with LockAll, and
// three candidates in child processes running Election.Run, watched by an
// observer in this process. Then it requires: every history linearizable
// against the fenced-register model (both of the mutex workload, each
// permit's, each account's, the election's register), no update lost and
// the accounts' total unchanged, no overlap in the strict mutex model (per
// permit and per account too, and over the election's terms: no leader
// still believing it leads after a later term's lead began), tokens
// unique and in order, terms writing in increasing order and every term
// that led observed in order, no claim left, every workload making progress during the faults and after
// them, and no goroutine left.
func TestChaos(t *testing.T) {
	res := run(t, runConfig{
		name: "chaos", seed: baseSeed(t), faultFor: faultPeriod(t), quiet: 6 * time.Second,
		inProc: 3, children: 3, fencing: true, hold: span{0, 1500 * time.Millisecond},
		prof: profile{kinds: allFaults, ttl: ttl},
		// Four of the permits holders are in this process so that more
		// than three guards can be seen valid at once, if the lock ever
		// let them be.
		permits:  group{inProc: 4, children: 1},
		transfer: group{inProc: 2, children: 1}, accounts: 6,
		election: 3,
	})
	requireClean(t, res)
	for _, k := range allFaults {
		if injected(res, k) == 0 {
			t.Errorf("no %v fault was injected: %v", k, res.faults)
		}
	}
	verifyNoLeaks(t)
}

// TestChaosFencingOffIsCaught is the first negative control: the mutex
// workload with the resource's fence turned off, the children's register
// Txns guarded by a comparison that always holds instead of their guard's,
// and child holders frozen between a read and its write. It proves, each
// on its own, that porcupine finds the late writes in both histories
// (Illegal for the resource and for the register in etcd) and that the
// lost-update check finds them in both stores' records. The checks that do
// not depend on the fence or the comparison (overlaps, tokens, claims
// left) must still pass.
func TestChaosFencingOffIsCaught(t *testing.T) {
	res := run(t, runConfig{
		name: "fencing-off", seed: baseSeed(t) + 1, faultFor: 35 * time.Second, quiet: 3 * time.Second,
		inProc: 1, children: 2, fencing: false, unguarded: true, hold: span{0, time.Second},
		prof: profile{kinds: []faultKind{faultFreeze}, ttl: ttl, targeted: true},
	})
	requireFencingOffCaught(t, res, "etcd")
	verifyNoLeaks(t)
}

// TestChaosTransferFencingOffIsCaught is the negative control of the
// transfer workload: with the bank's fences off and child holders frozen
// between reading balances and writing them back, a late write overwrites
// a newer transfer and the total changes. Three accounts, so that any two
// transfers share one. It proves, each on its own, that porcupine finds an
// account's history Illegal and that the bank's check at every applied
// write finds the total changed. The total at the end is not required to
// differ: later lost transfers can bring it back to the opening total.
func TestChaosTransferFencingOffIsCaught(t *testing.T) {
	res := run(t, runConfig{
		name: "transfer-fencing-off", seed: baseSeed(t) + 2, faultFor: 30 * time.Second, quiet: 3 * time.Second,
		fencing: false, hold: span{0, time.Second},
		prof:     profile{kinds: []faultKind{faultFreeze}, ttl: ttl, targeted: true},
		transfer: group{inProc: 1, children: 2}, accounts: 3,
	})
	x := res.xfer
	t.Logf("transfer with fencing off: total %d, want %d; %d writes changed it; accounts %s; over %v",
		x.finalTotal, x.total, len(x.broken), x.check, res.faults)
	pauses := injected(res, faultFreeze)
	if x.check != porcupine.Illegal {
		t.Errorf("transfer with fencing off: porcupine did not find an account's history Illegal (%s) in %d SIGSTOP pauses", x.check, pauses)
	}
	if len(x.broken) == 0 {
		t.Errorf("transfer with fencing off: no applied write changed the total in %d SIGSTOP pauses", pauses)
	}
	for _, v := range x.viz {
		_ = os.Remove(v) // the violation was the point
	}
	if len(x.overlaps) != 0 || x.doneButValid != 0 || len(x.problems) != 0 || len(res.leftoverClaims) != 0 || len(res.problems) != 0 {
		t.Errorf("transfer with fencing off: the parts that do not depend on the fence failed too: %v", res)
	}
	verifyNoLeaks(t)
}

// TestChaosElectionFencingOffIsCaught is the negative control of the
// election workload: leaders that go on writing with their term for 2 s
// after lead's context ended, at a register whose fence is off, while
// the current leader's lease is revoked or its process frozen. It proves,
// each on its own, that porcupine finds the register's history Illegal,
// that the lost-update check finds a lost update and that the term-order
// check finds an older term writing after a newer one; the checks that do
// not depend on the fence (the observer's, tokens, progress, claims left)
// must still pass.
func TestChaosElectionFencingOffIsCaught(t *testing.T) {
	res := run(t, runConfig{
		name: "election-fencing-off", seed: baseSeed(t) + 3, faultFor: 15 * time.Second, quiet: 3 * time.Second,
		fencing: false, hold: span{time.Second, 2 * time.Second}, election: 3, late: 2 * time.Second,
		prof: profile{kinds: []faultKind{faultRevoke, faultFreeze}, ttl: ttl, targeted: true},
	})
	e := res.elect
	if e.check != porcupine.Illegal {
		t.Errorf("election with fencing off: porcupine did not find the register's history Illegal (%s) over %v", e.check, res.faults)
	}
	if e.lost == 0 {
		t.Errorf("election with fencing off: no lost update found in the register's record over %v", res.faults)
	}
	if len(e.outOfOrder) == 0 {
		t.Errorf("election with fencing off: no write by an older term after a newer one's was found over %v", res.faults)
	}
	if e.lateAdmitted == 0 {
		t.Errorf("election with fencing off: no late write was made and admitted (%d made): the control did not run as meant", e.late)
	}
	t.Logf("election with fencing off: %d late writes admitted; register %s, %d lost updates, %d writes out of term order; over %v",
		e.lateAdmitted, e.check, e.lost, len(e.outOfOrder), res.faults)
	if e.viz != "" {
		_ = os.Remove(e.viz) // the violation was the point
	}
	if len(e.backwards)+len(e.missed)+len(e.wrongOwner)+len(e.problems) != 0 || len(res.leftoverClaims) != 0 || len(res.problems) != 0 {
		t.Errorf("election with fencing off: the parts that do not depend on the fence failed too: %v", res)
	}
	verifyNoLeaks(t)
}

// TestChaosLeaderBeliefIsCaught is the negative control of the leaders'
// probes: the election workload alone (three candidates), fence on, with
// leaders whose probes go on reporting that they lead for 2 s after
// lead's context ended (lead waits meanwhile and writes nothing more),
// while the current leader is blackholed past the TTL or frozen. Such a
// leader makes no late write, so the register's checks cannot see it: it
// proves that the strict mutex model over the terms, fed by the leaders'
// timed probes, finds a term believed after a later term's lead began.
// The other checks (the register's, the observer's, tokens, progress,
// claims left) must still pass.
func TestChaosLeaderBeliefIsCaught(t *testing.T) {
	res := run(t, runConfig{
		name: "leader-belief", seed: baseSeed(t) + 4, faultFor: 12 * time.Second, quiet: 5 * time.Second,
		// Holds longer than a blackholed leader's local deadline, so that
		// its context ends while lead runs.
		fencing: true, hold: span{2 * time.Second, 3 * time.Second}, election: 3, lateBelief: 2 * time.Second,
		prof: profile{kinds: []faultKind{faultBlackhole, faultFreeze}, ttl: ttl, targeted: true},
	})
	e := res.elect
	for _, o := range e.twoLeaders {
		t.Logf("  caught: %s", leaderOverlap(o))
	}
	t.Logf("leaders believing late: %d terms believed after a later term's lead began, %d late beliefs reported; over %v",
		len(e.twoLeaders), e.lateBeliefs, res.faults)
	if len(e.twoLeaders) == 0 {
		t.Errorf("the strict mutex model over the terms did not catch a leader believing late in %d blackholes and %d SIGSTOP pauses",
			injected(res, faultBlackhole), injected(res, faultFreeze))
	}
	if e.lateBeliefs == 0 {
		t.Errorf("no leader reported belief after its context ended: the control did not run as meant")
	}
	if e.check != porcupine.Ok || e.lost != 0 || e.late != 0 ||
		len(e.outOfOrder)+len(e.backwards)+len(e.missed)+len(e.wrongOwner)+len(e.problems) != 0 ||
		len(res.leftoverClaims) != 0 || len(res.problems) != 0 {
		t.Errorf("leaders believing late: the checks that do not depend on the probes failed too: %v", res)
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

// TestChaosSessionChildIsCaught is the negative control of the children's
// timed checks: three holders, all in child processes, take the lock with
// etcd's concurrency.Mutex and trust their session until its Done channel
// closes, and the current holder is blackholed for longer than the TTL
// (see TestChaosSessionDoneIsCaught for why that holder goes on trusting
// its session after the next holder's Lock has returned). It proves that
// the strict mutex model catches a child that believes too long: every
// holder is a child, so every overlap found is a child's. The same
// schedule with ashlock in the children must pass.
//
// The children are blackholed rather than frozen: a session frozen past
// its TTL sees its deadline passed the moment it runs again, racing the
// child's first check after the thaw, so a freeze could not be relied on
// to catch it.
func TestChaosSessionChildIsCaught(t *testing.T) {
	seed := baseSeed(t) + 20
	prof := profile{kinds: []faultKind{faultBlackhole}, ttl: ttl, targeted: true}
	// Long holds, so that a blackholed holder is still in its critical
	// section when its lease runs out.
	longHolds := span{2500 * time.Millisecond, 4500 * time.Millisecond}
	const quiet = 5 * time.Second // more than a long hold
	cfg := runConfig{
		name: "session-children", faultFor: 20 * time.Second, quiet: quiet,
		children: 3, session: true, fencing: true, hold: longHolds, prof: prof,
	}
	// Whether a blackhole catches the child inside its critical section is
	// a matter of timing: the control must catch it within a few runs (each
	// on a schedule of its own), not in every one.
	const attempts = 3
	caught, faults := 0, 0
	for i := range attempts {
		cfg.seed = seed + uint64(i)
		res := run(t, cfg)
		for _, o := range res.overlaps {
			t.Logf("  caught: %v", o)
		}
		faults += injected(res, faultBlackhole)
		caught += len(res.overlaps)
		if res.regCheck != porcupine.Ok || res.resCheck != porcupine.Ok || res.regLost+res.resLost != 0 {
			t.Errorf("session children: the fenced workloads failed: %v", res)
		}
		if caught > 0 {
			break
		}
	}
	t.Logf("session children: %d overlaps over %d blackholes", caught, faults)
	if caught == 0 {
		t.Errorf("the strict mutex model did not catch a child trusting its session in %d blackholes over %d runs", faults, attempts)
	}

	cfg.name, cfg.session = "library-children-same-schedule", false
	requireClean(t, run(t, cfg))
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
	if res.perm != nil {
		requirePermitsClean(t, res.perm)
	}
	if res.xfer != nil {
		requireTransferClean(t, res.xfer)
	}
	if res.elect != nil {
		requireElectionClean(t, res.elect)
	}
}

// requirePermitsClean fails t with every violation the permits workload's
// checks found.
func requirePermitsClean(t *testing.T, p *permitsResult) {
	t.Helper()
	for i, c := range p.checks {
		if c != porcupine.Ok {
			t.Errorf("permit %d register history: %s (visualizations: %q)", i, c, p.viz)
		}
	}
	if p.lost != 0 {
		t.Errorf("permit registers: %d lost updates (%d acknowledged)", p.lost, p.lostAcked)
	}
	for i, o := range p.overlaps {
		if i == 10 {
			t.Errorf("... and %d more per-permit overlaps", len(p.overlaps)-10)
			break
		}
		t.Errorf("strict mutex model, permit %d: %v", o.earlier.permit, o)
	}
	if p.mostValid > poolPermits {
		t.Errorf("%d guards of a %d-permit lock were valid at once", p.mostValid, poolPermits)
	}
	if p.doneButValid != 0 {
		t.Errorf("permits: %d checks found FencingToken succeeding after Done closed", p.doneButValid)
	}
	for _, s := range p.problems {
		t.Error(s)
	}
}

// requireTransferClean fails t with every violation the transfer
// workload's checks found.
func requireTransferClean(t *testing.T, x *transferResult) {
	t.Helper()
	if x.finalTotal != x.total {
		t.Errorf("accounts total %d at the end, want %d", x.finalTotal, x.total)
	}
	for _, b := range x.broken {
		t.Error(b)
	}
	if x.check != porcupine.Ok {
		t.Errorf("account histories: %s (visualizations: %q)", x.check, x.viz)
	}
	for i, o := range x.overlaps {
		if i == 10 {
			t.Errorf("... and %d more per-account overlaps", len(x.overlaps)-10)
			break
		}
		t.Errorf("strict mutex model, per account: %v", o)
	}
	if x.doneButValid != 0 {
		t.Errorf("transfer: %d checks found FencingToken succeeding after Done closed", x.doneButValid)
	}
	for _, s := range x.problems {
		t.Error(s)
	}
}
