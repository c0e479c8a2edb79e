package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// Bounds of the injector's own waits.
const (
	revokeTimeout  = 2 * time.Second
	revokeAttempts = 32
	revokeRetry    = 250 * time.Millisecond
	revokeBudget   = 8 * time.Second // all attempts of one revocation: outlasts a server restart
	// terminateTimeout bounds a pg_terminate_backend or a CLIENT KILL.
	terminateTimeout = 4 * time.Second
	// listenerGrace is how long after the server is back, or after its
	// connections were ended, the observer's listener (Redis: its
	// subscriber) may still be reconnecting: the Backend's longest
	// reconnection backoff (1 s on either) and a connection's start.
	listenerGrace = 2 * time.Second
	// aimTimeout: how long a fault aimed at the current holder waits for
	// the moment it aims at (an acquisition; for a freeze, an answered
	// read, so that the pause falls between a read and its write).
	aimTimeout = 1500 * time.Millisecond
)

// injector carries out fault schedules. Every fault is undone when its
// hold ends, or at once when the fault period ends, so after run returns
// the store and every route are whole again.
type injector struct {
	st       store
	inspect  backend.Backend // on the store's admin connection, under prefix: who holds and who waits
	prefix   string
	routes   []route        // by holder ID
	children map[int]*child // by holder ID
	logf     func(format string, args ...any)

	// revokeKeys are the keys whose child claims a revocation may take,
	// by workload; empty means lockKey alone.
	revokeKeys []revokeTarget

	current atomic.Int64 // ID of the holder that acquired last
	served  chan int     // IDs of children just answered a read; see childServed
	acqs    chan int     // IDs of holders that just acquired; see acquired

	clk clock // the run's, for revokedAt and gaps

	// observerRoute is the index of the election observer's route in
	// routes, or -1.
	observerRoute int

	mu     sync.Mutex
	counts map[string]int // faults injected, by kind (and variant)
	errs   []error        // failures to inject or undo a fault
	// revokedAt maps the token of every claim whose lease was revoked to
	// when the revocation returned.
	revokedAt map[uint64]int64
	// gaps are the times the observer's listener may have been without a
	// connection (PostgreSQL's and Redis's restarts, and ends of the
	// observer's connections).
	gaps []listenerGap
	// held are the times the observer's route held its bytes (a
	// blackhole or delay aimed at it).
	held []listenerGap
}

func newInjector(st store, inspect backend.Backend, prefix string, routes []route, children map[int]*child, clk clock, logf func(string, ...any)) *injector {
	// Faults are logged with the time on the run's clock, on which the
	// checks report what they find.
	at := func(format string, args ...any) {
		logf("[%.2fs] "+format, append([]any{time.Duration(clk.now()).Seconds()}, args...)...)
	}
	inj := &injector{st: st, inspect: inspect, prefix: prefix, routes: routes, children: children, clk: clk, logf: at,
		served: make(chan int, 64), acqs: make(chan int, 64), counts: make(map[string]int), revokedAt: make(map[uint64]int64)}
	inj.current.Store(-1)
	inj.observerRoute = -1
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

// gap records that the observer's listener may have been without a
// connection from from until now plus listenerGrace.
func (inj *injector) gap(from int64) {
	g := listenerGap{from: from, to: inj.clk.now() + int64(listenerGrace)}
	inj.mu.Lock()
	inj.gaps = append(inj.gaps, g)
	inj.mu.Unlock()
}

// observerHeld returns the times the observer's route held its bytes.
func (inj *injector) observerHeld() []listenerGap {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	return append([]listenerGap(nil), inj.held...)
}

// listenerGaps returns the gaps recorded.
func (inj *injector) listenerGaps() []listenerGap {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	return append([]listenerGap(nil), inj.gaps...)
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
	case faultLeaderKill, faultPartition, faultServerRestart, faultServerPause:
		return inj.serverFault(ctx, f)
	case faultBlackhole, faultDelay:
		return inj.disturb(ctx, f)
	case faultTerminate, faultClientKill:
		inj.terminate(ctx, f)
		return nil
	case faultRevoke:
		inj.revoke(ctx, f)
		return nil
	case faultFreeze:
		return inj.freeze(ctx, f)
	}
	return nil
}

// serverFault injects one of the store's own faults.
func (inj *injector) serverFault(ctx context.Context, f fault) func() error {
	from := inj.clk.now()
	kind, undo, err := inj.st.serverFault(ctx, f, inj.logf)
	if err != nil {
		inj.fail(fmt.Errorf("inject %v: %w", f, err))
		return nil
	}
	inj.count(kind)
	if f.kind != faultServerRestart {
		return undo
	}
	// Every connection ends with the server: until the observer's
	// listener is back, what happens is not notified.
	return func() error {
		err := undo()
		inj.gap(from)
		return err
	}
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

// aim returns the holder (or the observer) a client fault hits, or -1
// if ctx ended first.
func (inj *injector) aim(ctx context.Context, f fault) int {
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
			return -1
		}
	}
	return h
}

func (inj *injector) disturb(ctx context.Context, f fault) func() error {
	h := inj.aim(ctx, f)
	if h < 0 {
		return nil
	}
	r := inj.routes[h]
	if f.kind == faultBlackhole {
		r.blackhole()
	} else {
		r.delay(f.latency)
	}
	from := inj.clk.now()
	inj.count(f.kind.String())
	inj.logf("fault %v: holder %d", f, h)
	return func() error {
		r.heal()
		if h == inj.observerRoute {
			inj.mu.Lock()
			inj.held = append(inj.held, listenerGap{from: from, to: inj.clk.now()})
			inj.mu.Unlock()
		}
		return nil
	}
}

// terminate ends every connection of one holder's (its pool's and its
// Backend's listener's or subscriber's) from the server's side:
// pg_terminate_backend on PostgreSQL, CLIENT KILL on Redis.
func (inj *injector) terminate(ctx context.Context, f fault) {
	h := inj.aim(ctx, f)
	if h < 0 {
		return
	}
	t, ok := inj.routes[h].(terminator)
	if !ok {
		inj.fail(fmt.Errorf("inject %v: the store cannot end a holder's connections", f))
		return
	}
	tctx, cancel := context.WithTimeout(ctx, terminateTimeout)
	defer cancel()
	from := inj.clk.now()
	n, err := t.terminate(tctx)
	if h == inj.observerRoute {
		inj.gap(from)
	}
	if err != nil {
		// Not a test failure: the server may be down or stopped just now.
		inj.logf("fault %v: holder %d: %v", f, h, err)
		inj.count(f.kind.String() + " failed (server busy)")
		return
	}
	inj.count(f.kind.String())
	inj.logf("fault %v: ended %d connections of holder %d", f, n, h)
}
