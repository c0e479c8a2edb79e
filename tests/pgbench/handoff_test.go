package pgbench_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// waiterCounts are the queue lengths BenchmarkHandoffInterleaved measures.
var waiterCounts = []int{8, 32, 128}

// handoffRun is how many handoffs an implementation makes in one turn of
// BenchmarkHandoffInterleaved.
const handoffRun = 16

// handoffImpl is one implementation of BenchmarkHandoffInterleaved: setup
// makes n contenders for one lock, in a database of its own, each on
// connections of its own that ctr counts, closed in b.Cleanup.
type handoffImpl struct {
	name  string
	setup func(b testing.TB, ctr *counter, n int) []benchrun.Take
}

// BenchmarkHandoffInterleaved has N contenders per implementation take
// turns on one lock with an empty critical section, as tests/bench's
// BenchmarkHandoff does: a contender that gives the lock back asks again
// only once another contender has taken it, so every acquisition is a
// real handoff between clients (each on connections of its own) and N-1
// contenders are waiting (or about to) at any time. The implementations
// take turns of handoffRun handoffs each, in a round in which every one
// follows every other exactly once; between its turns an implementation
// stands still, its last holder holding and the others waiting.
//
//   - ashlock: each contender a root client on a Backend of its own (a
//     pool and a listener connection);
//   - floor: each contender the backend's statements by hand, on one
//     connection, and a second connection that listens, the shape of a
//     Backend (a pool and a listener): the release DELETE; the next
//     waiter's wake-up on the NOTIFY of that delete, a read of the queue
//     and its admission UPDATE; the releaser's enqueue batch as it queues
//     again;
//   - floor-1conn: the same, listening on the connection that sends the
//     statements, which a Backend cannot do (its pool connections serve
//     every lock, and may go through a pooler in transaction mode): the
//     woken waiter's read goes to a server process that is awake already;
//   - advisory: each contender its own connection, blocking in
//     pg_advisory_lock and giving the lock back with pg_advisory_unlock.
//
// It reports, per implementation, "<impl>-ns/handoff" (the time of its
// turns over its handoffs), "<impl>-stmts/handoff" and
// "<impl>-roundtrips/handoff" (everything its contenders sent, lease
// renewals excepted; pool pings are round trips, reported apart as
// "<impl>-pings/handoff" when there are any), and the ratios
// "ashlock/floor" (target: at most 1.5), "ashlock/floor-1conn",
// "ashlock/advisory" and "floor/advisory". Statements per handoff should
// not depend on N. ns/op is the time of one round of turns and means
// nothing by itself.
func BenchmarkHandoffInterleaved(b *testing.B) {
	impls := []handoffImpl{
		{"ashlock", ashlockContenders},
		{"floor", floorContenders},
		{"advisory", advisoryContenders},
		{"floor-1conn", floor1Contenders},
	}
	for _, n := range waiterCounts {
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			perHandoff := interleaveHandoffs(b, impls, n)
			b.ReportMetric(perHandoff[0]/perHandoff[1], "ashlock/floor")
			b.ReportMetric(perHandoff[0]/perHandoff[2], "ashlock/advisory")
			b.ReportMetric(perHandoff[1]/perHandoff[2], "floor/advisory")
			b.ReportMetric(perHandoff[0]/perHandoff[3], "ashlock/floor-1conn")
		})
	}
}

func ashlockContenders(b testing.TB, ctr *counter, n int) []benchrun.Take {
	db := newDatabase(b)
	takes := make([]benchrun.Take, n)
	for i := range takes {
		takes[i] = benchrun.Acquire(newAshlock(b, db, fmt.Sprint("handoff-ashlock-", i), ctr).Lock("k"))
	}
	return takes
}

// floorContenders wait on a listening connection of their own, besides
// the one they send statements on, as a Backend does.
func floorContenders(b testing.TB, ctr *counter, n int) []benchrun.Take {
	return floorContendersListening(b, ctr, n, listenApart)
}

// floor1Contenders wait on the connection they send statements on.
func floor1Contenders(b testing.TB, ctr *counter, n int) []benchrun.Take {
	return floorContendersListening(b, ctr, n, listenOnConn)
}

func floorContendersListening(b testing.TB, ctr *counter, n int, mode listenMode) []benchrun.Take {
	db := newDatabase(b)
	takes := make([]benchrun.Take, n)
	for i := range takes {
		f := newFloorClient(b, db, fmt.Sprint("handoff-floor-", i), ctr, "k", fmt.Sprint("floor-", i), mode)
		takes[i] = func(ctx context.Context) (func(context.Context) error, error) {
			token, err := f.acquire(ctx)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return f.release(ctx, token) }, nil
		}
	}
	return takes
}

func advisoryContenders(b testing.TB, ctr *counter, n int) []benchrun.Take {
	db := shared.NewDatabase(b)
	takes := make([]benchrun.Take, n)
	for i := range takes {
		conn := newConn(b, db, fmt.Sprint("handoff-advisory-", i), ctr)
		takes[i] = func(ctx context.Context) (func(context.Context) error, error) {
			if err := advisoryLock(ctx, conn); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return advisoryUnlock(ctx, conn) }, nil
		}
	}
	return takes
}

// interleaveHandoffs sets up n contenders of each implementation (in a
// random order), fills each one's queue with a warm-up of n acquisitions,
// then runs them in turns of handoffRun handoffs until b.Loop is done. It
// reports each implementation's figures and returns its ns per handoff,
// in the order of impls.
func interleaveHandoffs(b *testing.B, impls []handoffImpl, n int) []float64 {
	base := runCtx(b)
	ctx, stop := context.WithCancel(base)
	var wg sync.WaitGroup
	defer wg.Wait() // after stop, below: the contenders wind down
	defer stop()

	runs := make([]*contenders, len(impls))
	for _, k := range rand.Perm(len(impls)) {
		ctr := new(counter)
		runs[k] = newContenders(impls[k].name, ctr, impls[k].setup(b, ctr, n))
	}
	for _, k := range rand.Perm(len(impls)) {
		r := runs[k]
		r.setTurn(len(r.takes))
		for _, take := range r.takes {
			wg.Go(func() { r.contend(ctx, base, take) })
		}
		if _, err := r.await(base); err != nil {
			b.Fatalf("%s: warm-up: %v", r.name, err)
		}
	}

	before := make([]counts, len(impls))
	for k, r := range runs {
		before[k] = r.ctr.snapshot()
	}
	handoffs, perHandoff := benchrun.Rounds(b, len(impls), handoffRun, func(k int) (time.Duration, error) {
		d, err := runs[k].turn(base, handoffRun)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", runs[k].name, err)
		}
		return d, nil
	})
	for k, r := range runs {
		b.ReportMetric(perHandoff[k], r.name+"-ns/handoff")
		reportCounts(b, r.name+"-", r.ctr.snapshot().sub(before[k]), handoffs, "handoff")
	}
	return perHandoff
}

// contenders are one implementation's contenders for its lock, and what
// lets them run in turns: a turn is a budget of acquisitions; the
// contender whose acquisition spends it holds the lock until the next
// turn begins. Its methods are safe for concurrent use.
type contenders struct {
	name   string
	ctr    *counter
	takes  []benchrun.Take
	next   benchrun.Succession
	failed chan error // each contender sends at most once

	mu      sync.Mutex
	budget  int
	over    chan struct{} // closed when the budget is spent
	overAt  time.Time
	resume  chan struct{} // closed when the turn's first holder may release
	started time.Time
}

func newContenders(name string, ctr *counter, takes []benchrun.Take) *contenders {
	return &contenders{name: name, ctr: ctr, takes: takes, failed: make(chan error, len(takes)), resume: make(chan struct{})}
}

// setTurn gives the next turn a budget of n acquisitions and lets the
// holder of the last turn, if any, release.
func (r *contenders) setTurn(n int) {
	r.mu.Lock()
	r.budget, r.over = n, make(chan struct{})
	resume := r.resume
	r.resume = make(chan struct{})
	r.started = time.Now()
	r.mu.Unlock()
	close(resume)
}

// turn runs one turn of n acquisitions and returns its length: from the
// release of the lock held since the last turn to the n-th acquisition
// after it.
func (r *contenders) turn(ctx context.Context, n int) (time.Duration, error) {
	r.setTurn(n)
	return r.await(ctx)
}

// await waits for the end of the current turn and returns its length.
func (r *contenders) await(ctx context.Context) (time.Duration, error) {
	r.mu.Lock()
	over := r.over
	r.mu.Unlock()
	select {
	case <-over:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.overAt.Sub(r.started), nil
	case err := <-r.failed:
		return 0, err
	case <-ctx.Done():
		return 0, errors.New("turn timed out")
	}
}

// acquired counts an acquisition. If it spends the turn's budget, it
// holds the caller until the next turn begins (true) or ctx ends (false);
// an acquisition past the budget (after the run) is false at once.
func (r *contenders) acquired(ctx context.Context) bool {
	r.mu.Lock()
	r.budget--
	switch {
	case r.budget > 0:
		r.mu.Unlock()
		return true
	case r.budget < 0:
		// Only after the run: the holder that spent the last turn's
		// budget released when ctx ended, and a waiter got the lock
		// before its own cancellation.
		r.mu.Unlock()
		return false
	}
	r.overAt = time.Now()
	close(r.over)
	resume := r.resume
	r.mu.Unlock()
	select {
	case <-resume:
		return true
	case <-ctx.Done():
		return false
	}
}

// contend takes and gives back the lock until ctx ends, asking again only
// once another contender has taken the lock after it. A holder releases
// with base, also after ctx has ended.
func (r *contenders) contend(ctx, base context.Context, take benchrun.Take) {
	benchrun.Contend(ctx, base, take, r.failed, func() (<-chan struct{}, bool) {
		othersTurn := r.next.Taken()
		return othersTurn, r.acquired(ctx)
	})
}
