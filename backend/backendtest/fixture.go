package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ash-lock/ashlock/backend"
)

// holdTTL is the TTL of leases that must outlive their subtest. The suite
// revokes them in cleanup, so their length costs nothing.
const holdTTL = time.Minute

// pollEvery is how often the suite re-reads Inspect while waiting for a
// state it cannot be told about (a request reaching the queue).
const pollEvery = 5 * time.Millisecond

// fixture is one subtest's backend and helpers. Methods report through t
// and are called from the subtest's goroutine only.
type fixture struct {
	t       *testing.T
	b       backend.Backend
	timeout time.Duration
	// quiet is how long the suite watches for something that must not
	// happen (a second waiter waking, a spurious OnLost). It cannot prove
	// absence, only make a wrong wake-up likely to be seen.
	quiet time.Duration
	// waiters tracks every Acquire started in the background, so that
	// cleanup can insist they all returned.
	waiters *[]*pending
	// owners names the claims the subtest was given, by key and token, for
	// checks and messages about Inspect's holders.
	owners map[heldAt]string
}

func newFixture(t *testing.T, newBackend func(*testing.T) backend.Backend, timeout time.Duration) *fixture {
	b := newBackend(t)
	if b == nil {
		t.Fatal("backendtest: newBackend returned nil")
	}
	t.Cleanup(func() {
		// A second Close (CloseEndsEverything closes early) may return nil
		// or ErrClosed; anything else is a failure.
		if err := b.Close(); err != nil && !errors.Is(err, backend.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	if _, ok := b.(backend.ClaimNamer); ok {
		b = unnamed{b}
	}
	f := &fixture{t: t, b: b, timeout: timeout, quiet: min(100*time.Millisecond, timeout/10), waiters: new([]*pending), owners: map[heldAt]string{}}
	t.Cleanup(func() {
		// t.Context is cancelled by now, and every background Acquire
		// was derived from it: each must return.
		for _, p := range *f.waiters {
			select {
			case <-p.done:
			case <-time.After(timeout):
				t.Errorf("Acquire by %s did not return within %v of its context ending", p.owner, timeout)
			}
		}
	})
	return f
}

// sub returns a fixture sharing f's backend that reports through t, a
// subtest of f.t.
func (f *fixture) sub(t *testing.T) *fixture {
	g := *f
	g.t = t
	return &g
}

// ctx returns a context for one call, bounded by the suite's timeout.
func (f *fixture) ctx() context.Context {
	ctx, cancel := context.WithTimeout(f.t.Context(), f.timeout)
	f.t.Cleanup(cancel)
	return ctx
}

// grant grants a lease of at least ttl, failing the subtest if it cannot,
// and revokes it in cleanup.
func (f *fixture) grant(ttl time.Duration) backend.Lease {
	f.t.Helper()
	l, err := f.b.Grant(f.ctx(), ttl)
	if err != nil {
		f.t.Fatalf("Grant(%v): %v", ttl, err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		defer cancel()
		_ = f.b.Revoke(ctx, l.ID) // the backend may be closed already
	})
	return l
}

// unnamed is a backend.ClaimNamer under test: its requests go without an
// ID, as the client sends them.
type unnamed struct{ backend.Backend }

func (u unnamed) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	r.ID = ""
	return u.Backend.Acquire(ctx, r)
}

// req builds a fair, waiting request with a fresh ID.
func req(key string, l backend.Lease, owner string) backend.AcquireRequest {
	return backend.AcquireRequest{Key: key, ID: uuid.NewString(), Lease: l.ID, Owner: owner, Wait: true, Fair: true}
}

// unfair returns r as a non-fair request.
func unfair(r backend.AcquireRequest) backend.AcquireRequest { r.Fair = false; return r }

// try returns r as a non-waiting request.
func try(r backend.AcquireRequest) backend.AcquireRequest { r.Wait = false; return r }

// acquire runs r to completion, failing the subtest if it does not succeed.
func (f *fixture) acquire(r backend.AcquireRequest) backend.Claim {
	f.t.Helper()
	c, err := f.b.Acquire(f.ctx(), r)
	if err != nil {
		f.t.Fatalf("Acquire %q by %s: %v", r.Key, r.Owner, err)
	}
	f.checkClaim(r, c)
	return c
}

// checkClaim reports an error unless c is what a successful Acquire of r
// must return.
func (f *fixture) checkClaim(r backend.AcquireRequest, c backend.Claim) {
	f.t.Helper()
	// The claim's ID is req.ID or a name the backend chose; it must name
	// something.
	if c.Key != r.Key || c.ID == "" || c.Lease != r.Lease {
		f.t.Errorf("Acquire %q by %s returned claim {Key %q ID %q Lease %d}, want {Key %q ID non-empty Lease %d}",
			r.Key, r.Owner, c.Key, c.ID, c.Lease, r.Key, r.Lease)
	}
	n := max(r.Permits, 1)
	if !slices.Equal(c.Keys, r.Keys) || c.Shared != r.Shared || c.Permits != n || c.Permit < 0 || c.Permit >= n {
		f.t.Errorf("Acquire %q by %s returned claim {Keys %q Shared %v Permits %d Permit %d}, want {Keys %q Shared %v Permits %d Permit in 0..%d}",
			r.Key, r.Owner, c.Keys, c.Shared, c.Permits, c.Permit, r.Keys, r.Shared, n, n-1)
	}
	if !bytes.Equal(c.Value, r.Value) {
		f.t.Errorf("Acquire %q by %s returned claim with value %q, want the request's %q", r.Key, r.Owner, c.Value, r.Value)
	}
	f.named(r.Owner, c)
}

// release releases c, reporting an error.
func (f *fixture) release(c backend.Claim) {
	f.t.Helper()
	if err := f.b.Release(f.ctx(), c); err != nil {
		f.t.Errorf("Release %q token %d: %v", c.Key, c.Token, err)
	}
}

// inspect returns Inspect(key), failing the subtest on error.
func (f *fixture) inspect(key string) backend.LockInfo {
	f.t.Helper()
	info, err := f.b.Inspect(f.ctx(), key)
	if err != nil {
		f.t.Fatalf("Inspect %q: %v", key, err)
	}
	return info
}

// wantHolder reports an error unless key is held with token.
func (f *fixture) wantHolder(key string, token uint64, context string) {
	f.t.Helper()
	info := f.inspect(key)
	if !info.Held || info.Token != token {
		f.t.Errorf("%s: Inspect %q: Held %v token %d, want held by token %d", context, key, info.Held, info.Token, token)
	}
}

// wantFree reports an error unless key is free with nobody queued.
func (f *fixture) wantFree(key string, context string) {
	f.t.Helper()
	info := f.inspect(key)
	if info.Held || len(info.Waiters) > 0 || len(info.Holders) > 0 {
		f.t.Errorf("%s: Inspect %q: Held %v (owner %q, token %d), %d holders, %d waiters; want free, nobody queued",
			context, key, info.Held, info.Owner, info.Token, len(info.Holders), len(info.Waiters))
	}
}

// awaitWaiters polls Inspect until every owner in want is among key's
// waiters, then checks that the waiters are exactly want, in that order,
// with increasing tokens above the holder's. It returns the last
// LockInfo. A timeout is fatal: later steps would only time out too.
func (f *fixture) awaitWaiters(key string, want ...string) backend.LockInfo {
	f.t.Helper()
	deadline := time.Now().Add(f.timeout)
	var info backend.LockInfo
	for {
		info = f.inspect(key)
		got := waiterOwners(info)
		if containsAll(got, want) || (len(want) == 0 && len(got) == 0) {
			break
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("Inspect %q: waiters %q after %v, want %q to be queued", key, got, f.timeout, want)
		}
		time.Sleep(pollEvery)
	}
	if got := waiterOwners(info); !slices.Equal(got, want) {
		f.t.Errorf("Inspect %q: waiters %q, want exactly %q in request order", key, got, want)
	}
	prev := info.Token
	for _, w := range info.Waiters {
		if w.Token <= prev {
			f.t.Errorf("Inspect %q: waiter %s has token %d, not above the one before it (%d)", key, w.Owner, w.Token, prev)
		}
		prev = w.Token
	}
	return info
}

// awaitGone polls Inspect until owner is no longer among key's waiters.
func (f *fixture) awaitGone(key, owner string) {
	f.t.Helper()
	deadline := time.Now().Add(f.timeout)
	for {
		info := f.inspect(key)
		if !slices.Contains(waiterOwners(info), owner) && info.Owner != owner && !slices.Contains(holderOwners(info), owner) {
			return
		}
		if time.Now().After(deadline) {
			f.t.Errorf("Inspect %q: %s still listed %v after its request ended", key, owner, f.timeout)
			return
		}
		time.Sleep(pollEvery)
	}
}

func waiterOwners(info backend.LockInfo) []string {
	owners := make([]string, 0, len(info.Waiters))
	for _, w := range info.Waiters {
		owners = append(owners, w.Owner)
	}
	return owners
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// pending is an Acquire running in the background.
type pending struct {
	owner  string
	req    backend.AcquireRequest // as started, with its own copy of Value
	cancel context.CancelFunc
	done   chan struct{} // closed when Acquire returned; then claim and err are set
	claim  backend.Claim
	err    error
}

// start runs Acquire(r) on its own goroutine with a context bounded by the
// suite's timeout. Cancel it with p.cancel.
func (f *fixture) start(r backend.AcquireRequest) *pending {
	ctx, cancel := context.WithTimeout(f.t.Context(), f.timeout)
	return f.startCtx(ctx, cancel, r)
}

// startCtx is start with a context of the caller's.
func (f *fixture) startCtx(ctx context.Context, cancel context.CancelFunc, r backend.AcquireRequest) *pending {
	p := &pending{owner: r.Owner, req: r, cancel: cancel, done: make(chan struct{})}
	p.req.Value = bytes.Clone(r.Value)
	*f.waiters = append(*f.waiters, p)
	f.t.Cleanup(cancel)
	go func() {
		defer close(p.done)
		p.claim, p.err = f.b.Acquire(ctx, r)
	}()
	return p
}

// returned reports, without waiting, whether the Acquire has returned.
func (p *pending) returned() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to bound for the Acquire to return. A timeout is fatal.
func (f *fixture) wait(p *pending, bound time.Duration) (backend.Claim, error) {
	f.t.Helper()
	select {
	case <-p.done:
		return p.claim, p.err
	case <-time.After(bound):
		f.t.Fatalf("Acquire by %s did not return within %v", p.owner, bound)
		return backend.Claim{}, nil
	}
}

// got waits for the Acquire to succeed, failing the subtest if it fails
// or does not return within the suite's timeout.
func (f *fixture) got(p *pending) backend.Claim {
	f.t.Helper()
	c, err := f.wait(p, f.timeout)
	if err != nil {
		f.t.Fatalf("Acquire by %s: %v, want success", p.owner, err)
	}
	f.checkClaim(p.req, c)
	return c
}

// stillWaiting checks that none of ps returns within the quiet period.
func (f *fixture) stillWaiting(context string, ps ...*pending) {
	f.t.Helper()
	timer := time.NewTimer(f.quiet)
	defer timer.Stop()
	<-timer.C
	for _, p := range ps {
		if p.returned() {
			f.t.Errorf("%s: Acquire by %s returned (claim token %d, err %v), want it still waiting",
				context, p.owner, p.claim.Token, p.err)
		}
	}
}

// maxReported caps how many failures of one kind a check reports, so a
// thoroughly broken backend yields a readable report.
const maxReported = 5

// errorsCapped reports the first maxReported of errs and how many more
// there were.
func (f *fixture) errorsCapped(errs []error) {
	f.t.Helper()
	for i, err := range errs {
		if i == maxReported {
			f.t.Errorf("... and %d more like these", len(errs)-maxReported)
			return
		}
		f.t.Error(err)
	}
}

// lostRecorder records OnLost calls of one claim.
type lostRecorder struct {
	mu     sync.Mutex
	causes []error
	first  chan struct{} // closed at the first call
}

func newLostRecorder() *lostRecorder { return &lostRecorder{first: make(chan struct{})} }

func (r *lostRecorder) onLost(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.causes = append(r.causes, cause)
	if len(r.causes) == 1 {
		close(r.first)
	}
}

func (r *lostRecorder) calls() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.causes)
}

// awaitLost reports an error unless OnLost was called, with a non-nil
// cause, within bound.
func (f *fixture) awaitLost(r *lostRecorder, what string, bound time.Duration) {
	f.t.Helper()
	select {
	case <-r.first:
		if c := r.calls(); c[0] == nil {
			f.t.Errorf("OnLost of %s called with a nil cause", what)
		}
	case <-time.After(bound):
		f.t.Errorf("OnLost of %s not called within %v", what, bound)
	}
}

// runWorkers runs one(w, r) for rounds r of each of workers workers, each
// worker in a goroutine of its own, a worker stopping at its first error,
// which goes to report. It fails the test if they have not all finished
// within twice the fixture's timeout; what names the work in that message.
func (f *fixture) runWorkers(workers, rounds int, what string, one func(w, r int) error, report func(error)) {
	f.t.Helper()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				if err := one(w, r); err != nil {
					report(fmt.Errorf("worker %d round %d: %w", w, r, err))
					return
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2 * f.timeout):
		f.t.Fatalf("%d workers did not finish %d rounds of %s within %v", workers, rounds, what, 2*f.timeout)
	}
}
