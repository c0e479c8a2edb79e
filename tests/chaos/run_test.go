package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend/etcd"
)

// lockKey is the key every holder of a run contends for. It contains '/'
// so that the backend's key escaping is on the path.
const lockKey = "orders/42"

// runConfig describes one chaos run.
type runConfig struct {
	name     string
	seed     uint64
	faultFor time.Duration // how long faults are injected
	quiet    time.Duration // fault-free time after that, before stopping
	inProc   int           // holders in this process
	children int           // holders in child processes
	session  bool          // in-process holders use etcd's concurrency package (control)
	fencing  bool          // the resource fences reads and writes
	hold     span          // how long a holder keeps the lock each time
	prof     profile
}

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
}

// violations counts everything that breaks a guarantee (for the controls,
// what they are meant to provoke).
func (r *runResult) violations() int {
	n := r.regLost + r.resLost + len(r.overlaps) + r.doneButValid + len(r.leftoverClaims) + len(r.problems)
	if r.regCheck != porcupine.Ok {
		n++
	}
	if r.resCheck != porcupine.Ok {
		n++
	}
	return n
}

func (r *runResult) String() string {
	return fmt.Sprintf("%s seed=%d: %v of faults %v; %d holders (%d in-process, %d child processes); "+
		"%d acquisitions (%d after the faults), %d failed acquires, %d steps; "+
		"register: %d ops, %s, %d lost updates (%d acknowledged); "+
		"resource (fencing %v): %d ops, %s, %d lost updates (%d acknowledged); "+
		"strict mutex overlaps: %d (in-process holds ended by loss of the lock: %d, closest call %v); "+
		"Done-but-valid: %d; claims left: %d; other problems: %d; violations in all: %d; took %v",
		r.cfg.name, r.cfg.seed, r.cfg.faultFor, r.faults, r.cfg.inProc+r.cfg.children, r.cfg.inProc, r.cfg.children,
		r.acquisitions, r.afterFaults, r.failedAcquires, r.steps,
		r.regOps, r.regCheck, r.regLost, r.regLostAcked,
		r.cfg.fencing, r.resOps, r.resCheck, r.resLost, r.resLostAcked,
		len(r.overlaps), r.lostHolds, r.closest, r.doneButValid, len(r.leftoverClaims), len(r.problems), r.violations(),
		r.elapsed.Round(time.Second))
}

// harness holds what a run has started, so that teardown can stop it in
// order whatever point setup reached.
type harness struct {
	cl       *cluster
	admin    *clientv3.Client
	inspect  *etcd.Backend // on admin; closed before it
	sockDir  string
	routes   []*route
	holders  []*holder
	clients  []*clientv3.Client
	children []*child
	stopped  bool // stopHolders has run
}

// run carries out one chaos run and checks its histories. It fails t only
// when the harness itself breaks; what the checks found is in the result,
// for the caller to judge.
func run(t *testing.T, cfg runConfig) *runResult {
	t.Helper()
	res := &runResult{cfg: cfg}
	t.Logf("%s: seed %d (replay: go test ./chaos -run '^%s$' -seed %d)", cfg.name, cfg.seed, t.Name(), cfg.seed)
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

	h.check(t, res, resrc, regHist, acqs, from, healed)
	res.elapsed = time.Since(began)
	t.Log(res)
	return res
}

// setup starts the cluster, routes, holders and children.
func (h *harness) setup(t *testing.T, cfg runConfig) (clock, *resource, *history, *acquisitions, *injector, int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), memberTimeout)
	defer cancel()
	clk := newClock()
	var err error
	if h.cl, err = startCluster(ctx, 3); err != nil {
		return clk, nil, nil, nil, nil, 0, err
	}
	if h.admin, err = newEtcdClient(h.cl.clientAddrs()); err != nil {
		return clk, nil, nil, nil, nil, 0, err
	}
	regKey := registerKey(cfg)
	from, err := initRegister(ctx, h.admin, regKey)
	if err != nil {
		return clk, nil, nil, nil, nil, 0, err
	}
	// Unix socket paths are short-lived and must stay under ~100 bytes.
	if h.sockDir, err = os.MkdirTemp("", "ashchaos"); err != nil {
		return clk, nil, nil, nil, nil, 0, err
	}
	n := cfg.inProc + cfg.children
	for i := range n {
		r, err := newRoute(h.sockDir, fmt.Sprintf("h%d", i), h.cl.clientAddrs())
		if err != nil {
			return clk, nil, nil, nil, nil, 0, err
		}
		h.routes = append(h.routes, r)
	}
	resrc := newResource(clk, cfg.fencing)
	regHist, acqs := &history{}, &acquisitions{}
	children := make(map[int]*child)
	prefix := lockPrefix(cfg)
	if h.inspect, err = etcd.New(h.admin, etcd.WithPrefix(prefix)); err != nil {
		return clk, nil, nil, nil, nil, 0, err
	}
	inj := newInjector(h.cl, h.admin, h.inspect, prefix, h.routes, children, t.Logf)

	for i := range cfg.inProc {
		cli, err := newEtcdClient(h.routes[i].endpoints())
		if err != nil {
			return clk, nil, nil, nil, nil, 0, err
		}
		h.clients = append(h.clients, cli)
		var lk locker
		if cfg.session {
			lk = newSessionLocker(cli, prefix+"session/", cfg.prof.ttl)
		} else if lk, err = newLibLocker(ctx, cli, prefix, lockKey, fmt.Sprintf("holder-%d", i), cfg.prof.ttl, i%2 == 0); err != nil {
			return clk, nil, nil, nil, nil, 0, err
		}
		h.holders = append(h.holders, &holder{
			id: i, lk: lk, cli: cli, regKey: regKey, regHist: regHist, res: resrc, acqs: acqs, clk: clk,
			rng: rand.New(rand.NewPCG(cfg.seed, uint64(i))), hold: cfg.hold, onAcquire: inj.acquired,
		})
	}
	for i := cfg.inProc; i < n; i++ {
		ch := &child{id: i, route: h.routes[i], res: resrc, regHist: regHist, acqs: acqs, clk: clk,
			onAcq: inj.acquired, onRead: inj.childServed}
		err := startChild(ch, workerConfig{
			ID: i, Endpoints: h.routes[i].endpoints(), Prefix: prefix, Key: lockKey, RegKey: regKey,
			TTL: cfg.prof.ttl, Fair: i%2 == 0, Seed: cfg.seed, MinHold: cfg.hold.min, MaxHold: cfg.hold.max,
		})
		if err != nil {
			return clk, nil, nil, nil, nil, 0, err
		}
		h.children = append(h.children, ch)
		children[i] = ch
	}
	return clk, resrc, regHist, acqs, inj, from, nil
}

func lockPrefix(cfg runConfig) string { return fmt.Sprintf("chaos-%s-%d/", cfg.name, cfg.seed) }

func registerKey(cfg runConfig) string {
	return fmt.Sprintf("chaos-register-%s-%d", cfg.name, cfg.seed)
}

// stopHolders stops the children and closes the in-process lockers (which
// releases what they hold) and their clients. It is part of teardown too,
// and idempotent.
func (h *harness) stopHolders() []error {
	if h.stopped {
		return nil
	}
	h.stopped = true
	var errs []error
	for _, ch := range h.children {
		if err := ch.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ho := range h.holders {
		ctx, cancel := context.WithTimeout(context.Background(), 2*releaseTimeout)
		if err := ho.lk.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("holder %d: close: %w", ho.id, err))
		}
		cancel()
		if ho.stuck.Load() {
			errs = append(errs, fmt.Errorf("holder %d: prober did not stop", ho.id))
		}
	}
	for _, cli := range h.clients {
		if err := cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	return errs
}

// closeRoutes closes every route; closing a route twice does nothing.
func (h *harness) closeRoutes() []error {
	var errs []error
	for _, r := range h.routes {
		if err := r.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// teardown stops everything setup started, in order: holders, routes,
// the admin client, the cluster.
func (h *harness) teardown() []error {
	errs := append(h.stopHolders(), h.closeRoutes()...)
	if h.inspect != nil {
		if err := h.inspect.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if h.admin != nil {
		if err := h.admin.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	if h.cl != nil {
		if err := h.cl.close(); err != nil {
			errs = append(errs, err)
		}
	}
	if h.sockDir != "" {
		if err := os.RemoveAll(h.sockDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
