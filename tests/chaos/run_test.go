package chaos

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// lockKey is the key every holder of a run contends for. It contains '/'
// so that the backend's key escaping is on the path.
const lockKey = "orders/42"

// runConfig describes one chaos run.
type runConfig struct {
	name     string
	store    string // storeEtcd or storePostgres
	seed     uint64
	faultFor time.Duration // how long faults are injected
	quiet    time.Duration // fault-free time after that, before stopping
	inProc   int           // holders in this process
	children int           // holders in child processes
	session  bool          // in-process holders use etcd's concurrency package (control)
	fencing  bool          // the resource fences reads and writes
	// unguarded: children's register Txns carry a comparison that always
	// holds instead of their guard's (control).
	unguarded bool
	hold      span // how long a holder keeps the lock each time
	prof      profile
	// The holders above run the mutex workload; these run the permits,
	// transfer and election workloads (see permits_test.go,
	// transfer_test.go, election_test.go) under the same faults.
	permits  group
	transfer group
	accounts int           // the transfer workload's accounts
	election int           // candidates, each in a child process
	late     time.Duration // election leaders write this long after their term (control)
	// lateBelief: election leaders' probes report belief this long after
	// their term (control).
	lateBelief time.Duration
}

// group is how many holders run a workload, in this process and in child
// processes.
type group struct{ inProc, children int }

func (g group) size() int { return g.inProc + g.children }

// runResult is everything a run observed.
type runResult struct {
	cfg            runConfig
	elapsed        time.Duration
	acquisitions   int
	afterFaults    int // acquisitions that returned after the faults ended
	failedAcquires int64
	steps          int64
	faults         map[string]int

	regOps, resOps           int
	regCheck, resCheck       porcupine.CheckResult
	regViz, resViz           string
	regLost, regLostAcked    int
	resLost, resLostAcked    int
	overlaps                 []overlap
	lostHolds                int           // in-process holds that ended by losing the lock
	closest                  time.Duration // see closestCall; -1 if none
	doneButValid             int
	leftoverClaims           []string
	problems                 []string // token, stamp, record and liveness problems
	infraErrs                []error  // the harness itself failed
	clusterFaults, clientFlt []fault
	perm                     *permitsResult  // nil without permits holders
	xfer                     *transferResult // nil without transfer holders
	elect                    *electionResult // nil without candidates
}

// mutexRun reports whether the run has holders of the mutex workload.
func (r *runResult) mutexRun() bool { return r.cfg.inProc+r.cfg.children > 0 }

// violations counts everything that breaks a guarantee (for the controls,
// what they are meant to provoke).
func (r *runResult) violations() int {
	n := r.regLost + r.resLost + len(r.overlaps) + r.doneButValid + len(r.leftoverClaims) + len(r.problems)
	if r.mutexRun() && r.regCheck != porcupine.Ok {
		n++
	}
	if r.mutexRun() && r.resCheck != porcupine.Ok {
		n++
	}
	if r.perm != nil {
		n += r.perm.violations()
	}
	if r.xfer != nil {
		n += r.xfer.violations()
	}
	if r.elect != nil {
		n += r.elect.violations()
	}
	return n
}

func (r *runResult) String() string {
	s := fmt.Sprintf("%s seed=%d: %v of faults %v; claims left: %d; other problems: %d",
		r.cfg.name, r.cfg.seed, r.cfg.faultFor, r.faults, len(r.leftoverClaims), len(r.problems))
	if r.mutexRun() {
		s = r.mutexString()
	}
	if r.perm != nil {
		s += "; " + r.perm.String()
	}
	if r.xfer != nil {
		s += "; " + r.xfer.String()
	}
	if r.elect != nil {
		s += "; " + r.elect.String()
	}
	return s + fmt.Sprintf("; violations in all: %d; took %v", r.violations(), r.elapsed.Round(time.Second))
}

func (r *runResult) mutexString() string {
	return fmt.Sprintf("%s seed=%d: %v of faults %v; %d holders (%d in-process, %d child processes); "+
		"%d acquisitions (%d after the faults), %d failed acquires, %d steps; "+
		"register: %d ops, %s, %d lost updates (%d acknowledged); "+
		"resource (fencing %v): %d ops, %s, %d lost updates (%d acknowledged); "+
		"strict mutex overlaps: %d (in-process holds ended by loss of the lock: %d, closest call %v); "+
		"Done-but-valid: %d; claims left: %d; other problems: %d",
		r.cfg.name, r.cfg.seed, r.cfg.faultFor, r.faults, r.cfg.inProc+r.cfg.children, r.cfg.inProc, r.cfg.children,
		r.acquisitions, r.afterFaults, r.failedAcquires, r.steps,
		r.regOps, r.regCheck, r.regLost, r.regLostAcked,
		r.cfg.fencing, r.resOps, r.resCheck, r.resLost, r.resLostAcked,
		len(r.overlaps), r.lostHolds, r.closest, r.doneButValid, len(r.leftoverClaims), len(r.problems))
}

// run carries out one chaos run and checks its histories. It fails t only
// when the harness itself breaks; what the checks found is in the result,
// for the caller to judge.
func run(t *testing.T, cfg runConfig) *runResult {
	t.Helper()
	res := &runResult{cfg: cfg}
	// -seed gives the base seed, to which each test adds its offset.
	t.Logf("%s: seed %d (replay: go test ./chaos -run '^%s$' -seed %d)", cfg.name, cfg.seed, t.Name(), baseSeed(t))
	res.clusterFaults, res.clientFlt = schedule(cfg.seed, cfg.faultFor, cfg.prof)
	for _, f := range append(append([]fault(nil), res.clusterFaults...), res.clientFlt...) {
		t.Logf("  scheduled %v", f)
	}

	began := time.Now()
	h := &harness{}
	defer func() {
		for _, err := range h.teardown() {
			t.Error(err)
		}
	}()
	clk, resrc, regHist, acqs, inj, from, err := h.setup(t, cfg)
	if err != nil {
		t.Fatalf("%s: setup: %v", cfg.name, err)
	}

	hctx, stopHolders := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, ho := range h.holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ho.run(hctx)
		}()
	}

	// Faults, then a quiet spell: the lock must work again once they end.
	fctx, endFaults := context.WithTimeout(context.Background(), cfg.faultFor)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		var fwg sync.WaitGroup
		for _, stream := range [][]fault{res.clusterFaults, res.clientFlt} {
			fwg.Add(1)
			go func() {
				defer fwg.Done()
				inj.run(fctx, began, stream)
			}()
		}
		fwg.Wait()
	}()
	select {
	case <-faultsDone:
	case <-time.After(cfg.faultFor + 3*memberTimeout):
		t.Errorf("%s: fault injection did not finish", cfg.name)
	}
	endFaults()
	healed := clk.now()
	waitUntil(context.Background(), time.Now().Add(cfg.quiet))

	stopHolders()
	holdersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(holdersDone)
	}()
	select {
	case <-holdersDone:
	case <-time.After(acquireTimeout + 3*opTimeout + releaseTimeout + 10*time.Second):
		t.Fatalf("%s: in-process holders did not stop", cfg.name)
	}
	for _, err := range h.stopHolders() {
		res.infraErrs = append(res.infraErrs, err)
		t.Error(err)
	}
	// Closing the routes ends every connection, so nothing a holder sent
	// can still reach etcd while the checks read its history.
	for _, err := range h.closeRoutes() {
		t.Error(err)
	}
	res.faults, err = inj.result()
	if err != nil {
		t.Errorf("%s: fault injection: %v", cfg.name, err)
	}

	rev := inj.revocations()
	for _, l := range []*acquisitions{acqs, h.permAcqs, h.xferAcqs, h.elAcqs} {
		l.markRevoked(rev)
	}
	h.check(t, res, resrc, regHist, acqs, from, healed)
	res.elapsed = time.Since(began)
	t.Log(res)
	return res
}
