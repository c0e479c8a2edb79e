package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ash-lock/ashlock/backend"
)

// harness holds what a run has started, so that teardown can stop it in
// order whatever point setup reached.
type harness struct {
	st       store
	inj      *injector
	inspect  backend.Backend // on the store's admin connection; closed before it
	routes   []route
	holders  []*holder
	conns    []conn // the in-process holders'
	children []*child
	stopped  bool // stopHolders has run

	// The permits and transfer workloads' resources and acquisitions.
	pool               *pool
	bank               *bank
	permAcqs, xferAcqs *acquisitions
	// The election workload's register, terms and observer.
	elReg  *resource
	elAcqs *acquisitions
	obs    *observer
}

// holderSpec says what one holder of a run does and where it runs.
type holderSpec struct {
	workload string // wlMutex, wlPermits or wlTransfer
	child    bool
}

// holderSpecs lists a run's holders in ID order: the mutex workload's first
// (in this process, then children, so that a seed gives the mutex holders
// the same IDs and draws whichever other workloads run), then the
// permits workload's, then the transfer workload's, then the election's
// candidates (children only).
func holderSpecs(cfg runConfig) []holderSpec {
	var out []holderSpec
	for _, g := range []struct {
		wl string
		g  group
	}{{wlMutex, group{cfg.inProc, cfg.children}}, {wlPermits, cfg.permits}, {wlTransfer, cfg.transfer}, {wlElection, group{0, cfg.election}}} {
		for range g.g.inProc {
			out = append(out, holderSpec{workload: g.wl})
		}
		for range g.g.children {
			out = append(out, holderSpec{workload: g.wl, child: true})
		}
	}
	return out
}

// setup starts the store, routes, holders and children.
func (h *harness) setup(t *testing.T, cfg runConfig) (clock, *resource, *history, *acquisitions, *injector, int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), memberTimeout)
	defer cancel()
	clk := newClock()
	var err error
	if h.st, err = launchStore(ctx, cfg.store); err != nil {
		return clk, nil, nil, nil, nil, 0, err
	}
	regKey := registerKey(cfg)
	from, err := h.st.initRegister(ctx, regKey)
	if err != nil {
		return clk, nil, nil, nil, nil, 0, err
	}
	specs := holderSpecs(cfg)
	for i := range specs {
		r, err := h.st.newRoute(fmt.Sprintf("h%d", i))
		if err != nil {
			return clk, nil, nil, nil, nil, 0, err
		}
		h.routes = append(h.routes, r)
	}
	if cfg.election > 0 {
		// The observer's route comes last: client faults may hit it too.
		r, err := h.st.newRoute("obs")
		if err != nil {
			return clk, nil, nil, nil, nil, 0, err
		}
		h.routes = append(h.routes, r)
	}
	resrc := newResource(clk, resourceName, cfg.fencing)
	regHist, acqs := &history{}, &acquisitions{}
	h.pool, h.permAcqs = newPool(clk, poolPermits, cfg.fencing), &acquisitions{}
	h.bank, h.xferAcqs = newBank(clk, cfg.accounts, cfg.fencing), &acquisitions{}
	h.elReg, h.elAcqs = newResource(clk, electionResource, cfg.fencing), &acquisitions{}
	children := make(map[int]*child)
	prefix := lockPrefix(cfg)
	if h.inspect, err = h.st.inspector(ctx, prefix); err != nil {
		return clk, nil, nil, nil, nil, 0, err
	}
	inj := newInjector(h.st, h.inspect, prefix, h.routes, children, clk, t.Logf)
	h.inj = inj
	// Revocations take children's claims, of every workload that has
	// children.
	if cfg.children > 0 {
		inj.revokeKeys = append(inj.revokeKeys, revokeTarget{"lease-revoke", []string{lockKey}})
	}
	if cfg.permits.children > 0 {
		inj.revokeKeys = append(inj.revokeKeys, revokeTarget{"lease-revoke (permits)", []string{poolKey}})
	}
	if cfg.transfer.children > 0 {
		inj.revokeKeys = append(inj.revokeKeys, revokeTarget{"lease-revoke (LockAll)", h.bank.keys})
	}
	if cfg.election > 0 {
		inj.revokeKeys = append(inj.revokeKeys, revokeTarget{"lease-revoke (election)", []string{electionName}})
		inj.observerRoute = len(h.routes) - 1
		// Watching before any candidate starts, so that no term escapes.
		if h.obs, err = startObserver(ctx, h.routes[len(h.routes)-1], prefix, clk); err != nil {
			return clk, nil, nil, nil, nil, 0, err
		}
	}

	for i, sp := range specs {
		fair := i%2 == 0
		wacqs, key := acqs, lockKey
		var wl workload = mutexWorkload{}
		switch sp.workload {
		case wlPermits:
			wacqs, key, wl = h.permAcqs, poolKey, permitsWorkload{pool: h.pool}
		case wlTransfer:
			// The locker's own key is not used: each hold is a LockAll.
			wacqs, key, wl = h.xferAcqs, accountPrefix, transferWorkload{bank: h.bank}
		case wlElection:
			wacqs, key = h.elAcqs, electionName
		}
		if sp.child {
			ch := &child{id: i, workload: sp.workload, route: h.routes[i], res: resrc, pool: h.pool, bank: h.bank, elReg: h.elReg, regHist: regHist, acqs: wacqs, clk: clk,
				onAcq: inj.acquired, onRead: inj.childServed}
			err := startChild(ch, workerConfig{
				ID: i, Conn: h.routes[i].endpoint(), Prefix: prefix, Key: key, RegKey: regKey,
				TTL: cfg.prof.ttl, Fair: fair, Seed: cfg.seed, MinHold: cfg.hold.min, MaxHold: cfg.hold.max,
				Workload: sp.workload, Permits: poolPermits, Accounts: h.bank.keys, Late: cfg.late, LateBelief: cfg.lateBelief,
				Unguarded: cfg.unguarded, Session: cfg.session,
			})
			if err != nil {
				return clk, nil, nil, nil, nil, 0, err
			}
			h.children = append(h.children, ch)
			children[i] = ch
			continue
		}
		cn, err := openConn(ctx, h.routes[i].endpoint())
		if err != nil {
			return clk, nil, nil, nil, nil, 0, err
		}
		h.conns = append(h.conns, cn)
		var lk locker
		var reg register
		if cfg.session {
			// The control's sessions are etcd's.
			lk = newSessionLocker(cn.(*etcdConn).cli, prefix+"session/", cfg.prof.ttl)
			reg = cn.register(nil, regKey, lockKey, false)
		} else {
			ll, err := newLibLocker(ctx, cn, prefix, key, fmt.Sprintf("holder-%d", i), cfg.prof.ttl, fair)
			if err != nil {
				return clk, nil, nil, nil, nil, 0, err
			}
			if sp.workload == wlPermits {
				ll.withPermits(poolPermits)
			}
			lk, reg = ll, cn.register(ll.be, regKey, lockKey, false)
		}
		h.holders = append(h.holders, &holder{
			id: i, lk: lk, reg: reg, regHist: regHist, res: resrc, acqs: wacqs, clk: clk, wl: wl, wlName: sp.workload,
			rng: rand.New(rand.NewPCG(cfg.seed, uint64(i))), hold: cfg.hold, onAcquire: inj.acquired,
		})
	}
	return clk, resrc, regHist, acqs, inj, from, nil
}

func lockPrefix(cfg runConfig) string { return fmt.Sprintf("chaos-%s-%d/", cfg.name, cfg.seed) }

func registerKey(cfg runConfig) string {
	return fmt.Sprintf("chaos-register-%s-%d", cfg.name, cfg.seed)
}

// stopHolders stops the children and closes the in-process lockers (which
// releases what they hold) and their connections. It is part of teardown too,
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
	if h.obs != nil {
		// The candidates have stopped: the observer must now see the last
		// term that led or wrote, then nobody leading.
		if err := h.obs.stop(lastTerm(h.elReg, h.elAcqs)); err != nil {
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
	for _, cn := range h.conns {
		if err := cn.close(); err != nil {
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
// the store.
func (h *harness) teardown() []error {
	errs := append(h.stopHolders(), h.closeRoutes()...)
	if h.inspect != nil {
		if err := h.inspect.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if h.st != nil {
		if err := h.st.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
