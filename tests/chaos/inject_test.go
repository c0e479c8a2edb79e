package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend/etcd"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// Bounds of the injector's own waits.
const (
	revokeTimeout  = 2 * time.Second
	revokeAttempts = 8
	revokeRetry    = 250 * time.Millisecond
	// aimTimeout: how long a fault aimed at the current holder waits for
	// the moment it aims at (an acquisition; for a freeze, an answered
	// read, so that the pause falls between a read and its write).
	aimTimeout = 1500 * time.Millisecond
)

// injector carries out fault schedules. Every fault is undone when its
// hold ends, or at once when the fault period ends, so after run returns
// the cluster and every route are whole again.
type injector struct {
	cl       *etcdtest.Cluster
	admin    *clientv3.Client
	inspect  *etcd.Backend // on admin, under prefix: who holds and who waits
	prefix   string
	routes   []*route       // by holder ID
	children map[int]*child // by holder ID
	logf     func(format string, args ...any)

	// revokeKeys are the keys whose child claims a revocation may take,
	// by workload; empty means lockKey alone.
	revokeKeys []revokeTarget

	current atomic.Int64 // ID of the holder that acquired last
	served  chan int     // IDs of children just answered a read; see childServed
	acqs    chan int     // IDs of holders that just acquired; see acquired

	clk clock // the run's, for revokedAt

	mu     sync.Mutex
	counts map[string]int // faults injected, by kind (and variant)
	errs   []error        // failures to inject or undo a fault
	// revokedAt maps the token of every claim whose lease was revoked to
	// when the revocation returned.
	revokedAt map[uint64]int64
}

func newInjector(cl *etcdtest.Cluster, admin *clientv3.Client, inspect *etcd.Backend, prefix string, routes []*route, children map[int]*child, clk clock, logf func(string, ...any)) *injector {
	inj := &injector{cl: cl, admin: admin, inspect: inspect, prefix: prefix, routes: routes, children: children, clk: clk, logf: logf,
		served: make(chan int, 64), acqs: make(chan int, 64), counts: make(map[string]int), revokedAt: make(map[uint64]int64)}
	inj.current.Store(-1)
	return inj
}

// revokeTarget is one workload's keys, and the name its revocations are
// counted under.
type revokeTarget struct {
	kind string
	keys []string
}

// acquired is the holders' onAcquire hook. It never blocks.
func (inj *injector) acquired(holder int) {
	inj.current.Store(int64(holder))
	select {
	case inj.acqs <- holder:
	default:
	}
}

// childServed is the children's hook, called after a child was answered a
// read: the moment to freeze it for a late write. It never blocks.
func (inj *injector) childServed(holder int) {
	select {
	case inj.served <- holder:
	default:
	}
}

func (inj *injector) count(kind string) {
	inj.mu.Lock()
	inj.counts[kind]++
	inj.mu.Unlock()
}

func (inj *injector) fail(err error) {
	inj.mu.Lock()
	inj.errs = append(inj.errs, err)
	inj.mu.Unlock()
}

// revoked records that the lease of the claim with token was revoked,
// the revocation having returned just now.
func (inj *injector) revoked(token uint64) {
	at := inj.clk.now()
	inj.mu.Lock()
	inj.revokedAt[token] = at
	inj.mu.Unlock()
}

// revocations returns when each revoked claim's revocation returned, by
// token.
func (inj *injector) revocations() map[uint64]int64 {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	out := make(map[uint64]int64, len(inj.revokedAt))
	for k, v := range inj.revokedAt {
		out[k] = v
	}
	return out
}

func (inj *injector) result() (map[string]int, error) {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	counts := make(map[string]int, len(inj.counts))
	for k, v := range inj.counts {
		counts[k] = v
	}
	return counts, errors.Join(inj.errs...)
}

// run injects faults in order, each at start+f.at, until the list or ctx
// ends.
func (inj *injector) run(ctx context.Context, start time.Time, faults []fault) {
	for _, f := range faults {
		if !waitUntil(ctx, start.Add(f.at)) {
			return
		}
		undo := inj.apply(ctx, f)
		if undo == nil {
			continue
		}
		waitUntil(ctx, time.Now().Add(f.hold))
		if err := undo(); err != nil {
			inj.fail(fmt.Errorf("undo %v: %w", f, err))
		}
	}
}

// waitUntil waits for t or ctx's end and reports whether t came first.
// (A wait that schedules a fault, not one that stands in for
// synchronisation.)
func waitUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// apply injects f and returns the function that undoes it, or nil when
// there is nothing to undo (or nothing was injected).
func (inj *injector) apply(ctx context.Context, f fault) func() error {
	switch f.kind {
	case faultLeaderKill:
		return inj.kill(ctx, f)
	case faultPartition:
		return inj.partition(f)
	case faultBlackhole, faultDelay:
		return inj.disturb(ctx, f)
	case faultRevoke:
		inj.revoke(ctx, f)
		return nil
	case faultFreeze:
		return inj.freeze(ctx, f)
	}
	return nil
}

func (inj *injector) kill(ctx context.Context, f fault) func() error {
	i, kind := inj.cl.Leader(), "leader-kill"
	if i < 0 {
		// Mid-election: crash a member anyway.
		i, kind = int(f.pick%3), "member-kill (no leader at the time)"
	}
	inj.cl.StopMember(i)
	inj.count(kind)
	inj.logf("fault %v: stopped member %d", f, i)
	return func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), memberTimeout)
		defer cancel()
		return inj.cl.RestartMember(rctx, i)
	}
}

func (inj *injector) partition(f fault) func() error {
	i := inj.cl.Leader()
	if i < 0 || f.pick%2 == 1 {
		i = int(f.pick % 3)
	}
	if err := inj.cl.Partition(i); err != nil {
		inj.fail(err)
		return nil
	}
	inj.count("member-partition")
	inj.logf("fault %v: cut member %d off", f, i)
	return func() error { inj.cl.Heal(); return nil }
}

// target returns the holder a client fault aims at among candidates.
func (inj *injector) target(f fault, candidates []int) int {
	if f.current {
		cur := int(inj.current.Load())
		for _, c := range candidates {
			if c == cur {
				return cur
			}
		}
	}
	return candidates[f.pick%uint64(len(candidates))]
}

func (inj *injector) disturb(ctx context.Context, f fault) func() error {
	ids := make([]int, len(inj.routes))
	for i := range ids {
		ids[i] = i
	}
	h := inj.target(f, ids)
	if f.current {
		// Aim at the start of a hold: the holder is then sure to be in its
		// critical section when the fault bites. Take whoever acquires
		// next, or the last one to acquire if nobody does in time.
		for len(inj.acqs) > 0 {
			<-inj.acqs
		}
		select {
		case h = <-inj.acqs:
		case <-time.After(aimTimeout):
		case <-ctx.Done():
			return nil
		}
	}
	r := inj.routes[h]
	if f.kind == faultBlackhole {
		r.blackhole()
	} else {
		r.delay(f.latency)
	}
	inj.count(f.kind.String())
	inj.logf("fault %v: holder %d", f, h)
	return func() error { r.heal(); return nil }
}
