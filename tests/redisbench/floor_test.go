package redisbench_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// handoffScripts are the commands of one ashlock handoff, recorded from a
// live one: the holder's release (which the next claim hears, and holds
// on; it records the next claim's acquisition time too) and the holder's
// enqueue at the back.
type handoffScripts struct {
	enqueue, release []any
}

// recordHandoff records a handoff between two ashlock clients on Backends
// of their own: a holder, and a waiter that takes the key when the holder
// releases. The holder's client stays open, so that its lease, which the
// recorded enqueue names, stays alive. A first handoff, unrecorded, loads
// the scripts (go-redis sends a script by EVAL the first time).
func recordHandoff(b *testing.B) handoffScripts {
	ctx := runCtx(b)
	prefix := newPrefix("floor-handoff")
	hrec, wrec := &counter{}, &counter{}
	holder := newAshlock(b, newClient(b, hrec), prefix).Lock("k")
	waiter := newAshlock(b, newClient(b, wrec), prefix).Lock("k")
	watch := newAshlock(b, newClient(b, nil), prefix)
	handoff := func() {
		g, err := holder.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			w, err := waiter.Acquire(ctx)
			if err == nil {
				err = w.Unlock(ctx)
			}
			got <- err
		}()
		if err := benchrun.WaitQueued(ctx, watch, "k", 1); err != nil {
			b.Fatalf("floor: the waiter: %v", err)
		}
		if err := g.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := <-got; err != nil {
			b.Fatal(err)
		}
	}
	handoff()
	hrec.recording(true)
	wrec.recording(true)
	handoff()
	h, w := scriptRuns(hrec.recording(false)), scriptRuns(wrec.recording(false))
	// The holder: an uncontended enqueue and the release. The waiter: its
	// enqueue, its check of the holder once its subscription is confirmed
	// (or a read if the release came first), and its release.
	if len(h) != 2 || len(w) < 2 {
		b.Fatalf("floor: a handoff sent %d and %d commands: %v %v", len(h), len(w), h, w)
	}
	s := handoffScripts{enqueue: h[0], release: h[1]}
	for _, c := range [][]any{s.enqueue, s.release} {
		if c == nil || !isEvalSha(c, 7) {
			b.Fatalf("floor: not a script run by EVALSHA: %v (the waiter sent %v)", c, w)
		}
	}
	return s
}

// scriptRuns returns the EVALSHA commands of cmds: a script's first run,
// EVALSHA answered by NOSCRIPT, is sent again by EVAL, and a new
// connection sends CLIENT SETINFO.
func scriptRuns(cmds [][]any) [][]any {
	return slices.DeleteFunc(cmds, func(c []any) bool { return !isEvalSha(c, 1) })
}

// floorClaim is one claim of the floor's queue.
type floorClaim struct{ id, token string }

// floor runs the very commands ashlock sends for a handoff, back to back
// on one client with no waiting, on a queue of its own of n claims under
// the recorded holder's lease: each handoff releases the head (which
// records the next claim's acquisition time) and then enqueues the
// released claim at the back again. The release is the chain from one
// holder to the next (the next claim holds on hearing it), timed; the
// enqueue, which in ashlock runs beside the chain, is not.
type floor struct {
	s   handoffScripts
	rc  *goredis.Client
	rj  *goredis.Client // measureLoop's second connection: the rejoining claims'
	ctr *counter
	q   []floorClaim
}

func newFloor(b *testing.B, n int) *floor {
	f := &floor{s: recordHandoff(b), ctr: &counter{}}
	f.rc, f.rj = newClient(b, f.ctr), newClient(b, f.ctr)
	ctx := runCtx(b)
	for i := range n {
		id := fmt.Sprintf("floor-%d", i)
		tok, err := f.enqueue(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		f.q = append(f.q, floorClaim{id, tok})
	}
	return f
}

// run sends args with the arguments set replaced. Argument 5 is each
// script's ARGV[2], the claim ID; argument 6 is the enqueue's lease, kept,
// or the token of the others; the read's last argument is the highest
// token to list.
func (f *floor) run(ctx context.Context, args []any, set map[int]any) ([]any, error) {
	return f.runOn(ctx, f.rc, args, set)
}

// runOn is run on the connection rc.
func (f *floor) runOn(ctx context.Context, rc *goredis.Client, args []any, set map[int]any) ([]any, error) {
	c := append([]any(nil), args...)
	for i, v := range set {
		c[i] = v
	}
	v, err := rc.Do(ctx, c...).Result()
	if err != nil {
		return nil, err
	}
	out, _ := v.([]any)
	return out, nil
}

func (f *floor) enqueue(ctx context.Context, id string) (string, error) {
	return f.enqueueOn(ctx, f.rc, id)
}

func (f *floor) enqueueOn(ctx context.Context, rc *goredis.Client, id string) (string, error) {
	v, err := f.runOn(ctx, rc, f.s.enqueue, map[int]any{5: id})
	if err != nil {
		return "", err
	}
	if len(v) < 2 || (v[0] != "ok" && v[0] != "queued") {
		return "", fmt.Errorf("floor: enqueue answered %v", v)
	}
	tok, _ := v[1].(string)
	return tok, nil
}

// measure runs count handoffs and returns the time of their chains (the
// releases, fsynced).
func (f *floor) measure(ctx context.Context, count int) (chain time.Duration, err error) {
	for range count {
		head := f.q[0]
		start := time.Now()
		if _, err := f.run(ctx, f.s.release, map[int]any{5: head.id, 6: head.token}); err != nil {
			return 0, err
		}
		chain += time.Since(start)
		tok, err := f.enqueue(ctx, head.id)
		if err != nil {
			return 0, err
		}
		f.q = append(f.q[1:], floorClaim{head.id, tok})
	}
	return chain, nil
}

// measureLoop runs count handoffs as the closed loop of this benchmark
// would go with contenders that take no time at all: as soon as a release
// is answered, the next claim's release goes out (its holder heard the
// first and lets go at once) and, at the same instant on a connection of
// its own, the released claim's enqueue at the back (its holder asking
// again), which the chain does not wait for. The release and the return
// to the queue are what any lock that queues its waiters durably must
// write per handoff while N contenders
// keep coming back. Two writes that reach the server in the same turn of
// its event loop share an fsync; one that comes while an fsync runs waits
// for it. It returns the time of the count handoffs; the queue is as it
// was (n claims, the first holding) when it returns.
func (f *floor) measureLoop(ctx context.Context, count int) (time.Duration, error) {
	// The enqueues go out one at a time, in the order of the releases, so
	// that the server queues the claims in the order of f.q.
	type rejoin struct {
		claim floorClaim
		err   error
		done  chan struct{}
	}
	ready := make(chan struct{})
	close(ready)
	q := make([]*rejoin, len(f.q))
	for i, c := range f.q {
		q[i] = &rejoin{claim: c, done: ready}
	}
	rejoins := make(chan *rejoin, count+1)
	worker := make(chan struct{})
	go func() {
		defer close(worker)
		for r := range rejoins {
			r.claim.token, r.err = f.enqueueOn(ctx, f.rj, r.claim.id)
			close(r.done)
		}
	}()
	back := func(c floorClaim) {
		r := &rejoin{claim: floorClaim{id: c.id}, done: make(chan struct{})}
		q = append(q, r)
		rejoins <- r
	}
	finish := func(err error) error {
		close(rejoins)
		<-worker
		f.q = f.q[:0]
		for _, r := range q {
			err = errors.Join(err, r.err)
			f.q = append(f.q, r.claim)
		}
		return err
	}

	prev := q[0].claim
	if _, err := f.run(ctx, f.s.release, map[int]any{5: prev.id, 6: prev.token}); err != nil {
		return 0, finish(err)
	}
	q = q[1:]
	start := time.Now()
	for range count {
		<-q[0].done
		if q[0].err != nil {
			return 0, finish(nil)
		}
		next := q[0].claim
		back(prev)
		if _, err := f.run(ctx, f.s.release, map[int]any{5: next.id, 6: next.token}); err != nil {
			return 0, finish(err)
		}
		q = q[1:]
		prev = next
	}
	elapsed := time.Since(start)
	back(prev)
	return elapsed, finish(nil)
}

// floorHandoff runs b.N floor handoffs on a queue of n claims and reports
// handoffs/s (the chain: the rate if waking the next holder were free,
// which is also what any lock that makes the release durable before the
// taker learns of it pays at the least) and reqs/handoff.
func floorHandoff(b *testing.B, n int) {
	f := newFloor(b, n)
	before := f.ctr.requests()
	chain, err := f.measure(runCtx(b), b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(f.ctr.requests()-before)/float64(b.N), "reqs/handoff")
	b.ReportMetric(float64(b.N)/chain.Seconds(), "handoffs/s")
}

// idealLoopHandoff runs b.N handoffs of the ideal closed loop (see
// floor.measureLoop) on a queue of n claims and reports handoffs/s (two
// requests each, by construction).
func idealLoopHandoff(b *testing.B, n int) {
	took, err := newFloor(b, n).measureLoop(runCtx(b), b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/took.Seconds(), "handoffs/s")
}
