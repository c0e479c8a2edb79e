package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Timing of the workload.
const (
	acquireTimeout = 8 * time.Second        // one Acquire
	opTimeout      = 2 * time.Second        // one etcd Txn on the register
	releaseTimeout = 3 * time.Second        // one Unlock
	probeEvery     = 2 * time.Millisecond   // how often a holder re-checks its lock
	maxWork        = 30 * time.Millisecond  // work between a read and its write
	retryPause     = 100 * time.Millisecond // after a failed Acquire, at most
)

// span is a range of durations to draw from.
type span struct{ min, max time.Duration }

func (s span) draw(rng *rand.Rand) time.Duration {
	if s.max <= s.min {
		return s.min
	}
	return s.min + time.Duration(rng.Int64N(int64(s.max-s.min)))
}

// holder is a lock holder running in this process, in its own goroutine,
// with its own locker on its own connection to the store through its own
// route. While
// it holds the lock it does its workload's steps (for the mutex workload,
// read-modify-writes on the register in the store (a) and on the fenced
// resource (b)), and a prober records, on the run's clock, the last moment
// it still believed it held the lock.
type holder struct {
	id      int
	lk      locker
	reg     register // the mutex workload's, through the holder's connection
	regHist *history
	res     *resource
	acqs    *acquisitions
	clk     clock
	rng     *rand.Rand // owned by the holder's goroutine
	hold    span       // how long to keep the lock each time
	wl      workload   // which lock it takes and what it does under it
	wlName  string     // the workload's name (wlMutex, ...)
	// onAcquire is told of every acquisition, for faults that target the
	// current holder.
	onAcquire func(holder int)

	failedAcquires atomic.Int64
	steps          atomic.Int64
	stuck          atomic.Bool // the prober failed to stop
	seq            int
}

// run takes the lock over and over until ctx ends.
func (h *holder) run(ctx context.Context) {
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, acquireTimeout)
		called := h.clk.now()
		hd, err := h.wl.acquire(actx, h.lk, h.rng)
		cancel()
		if err != nil {
			h.failedAcquires.Add(1)
			h.pause(ctx, time.Duration(h.rng.Int64N(int64(retryPause))))
			continue
		}
		w, l, ok := hd.stamp()
		a := &acquisition{holder: h.id, token: hd.token(), returned: h.clk.now(), probed: true, stampW: w, stampL: l, hasStamp: ok,
			permit: hd.permit(), keys: hd.keys(), called: called}
		h.acqs.add(a)
		h.onAcquire(h.id)

		stop, stopped := make(chan struct{}), make(chan struct{})
		go h.probe(hd, a, stop, stopped)
		h.critical(ctx, hd, a)
		if !hd.valid() {
			// Lost while holding, whether or not a check noticed in time.
			h.acqs.update(a, func(a *acquisition) { a.lost = true })
		}
		close(stop)
		select {
		case <-stopped:
		case <-time.After(time.Minute):
			// The prober only ever waits on stop, so this is a bug here.
			h.stuck.Store(true)
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		_ = hd.release(rctx) // failures are the library's to retry; the checks see the result
		cancel()
	}
}

// believe records a check, made at t, that found the lock held.
func (h *holder) believe(a *acquisition, t int64) {
	h.acqs.update(a, func(a *acquisition) { a.believed = max(a.believed, t) })
}

// probe re-checks the lock every probeEvery until stop closes or the lock
// is seen lost. Each check is timed before it is made, so a success
// recorded at t means the holder believed it held the lock at t or later.
// After Done closes one more check is made: it must fail.
func (h *holder) probe(hd held, a *acquisition, stop <-chan struct{}, stopped chan<- struct{}) {
	probeLoop(hd.done(), probeEvery, stop, stopped, func(doneSeen bool) bool {
		at := h.clk.now()
		ok := hd.valid()
		if ok {
			h.believe(a, at)
		}
		if doneSeen {
			if ok {
				h.acqs.update(a, func(a *acquisition) { a.doneButValid++ })
			}
			return false
		}
		if !ok {
			h.acqs.update(a, func(a *acquisition) { a.lost = true })
		}
		return ok
	})
}

// probeLoop calls check every `every` until stop closes or check returns
// false, and once more (with doneSeen set) as soon as done has closed (a
// guard's Done, or an election term's context's; nil never closes); it
// closes stopped when it returns.
func probeLoop(done <-chan struct{}, every time.Duration, stop <-chan struct{}, stopped chan<- struct{}, check func(doneSeen bool) bool) {
	defer close(stopped)
	t := time.NewTicker(every)
	defer t.Stop()
	doneSeen := false
	for {
		if !check(doneSeen) || doneSeen {
			return
		}
		select {
		case <-stop:
			return
		case <-done:
			doneSeen = true
		case <-t.C:
		}
	}
}

// critical holds the lock for a random time in hold (at least one step),
// doing the workload's steps. It checks the lock before each step as a careful holder would -
// but not between a read and its write, where a pause is what fencing is
// for.
func (h *holder) critical(ctx context.Context, hd held, a *acquisition) {
	until := time.Now().Add(h.hold.draw(h.rng))
	for first := true; first || time.Now().Before(until); first = false {
		at := h.clk.now()
		if ctx.Err() != nil || !hd.valid() {
			return
		}
		h.believe(a, at)
		h.wl.step(ctx, h, hd)
		h.steps.Add(1)
	}
}

func (h *holder) nextTag() string {
	h.seq++
	return fmt.Sprintf("h%d-%d", h.id, h.seq)
}

func (h *holder) registerStep(ctx context.Context, hd held) {
	tok := hd.token()
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	call := h.clk.now()
	v, st := h.reg.read(octx, hd)
	cancel()
	h.regHist.add(op{holder: h.id, in: regInput{kind: opRead, token: tok}, out: regOutput{status: st, value: v}, call: call, ret: h.clk.now()})
	if st != statusOK {
		return
	}
	h.work(ctx)
	in := regInput{kind: opWrite, token: tok, value: v + 1, tag: h.nextTag()}
	octx, cancel = context.WithTimeout(ctx, opTimeout)
	call = h.clk.now()
	st = h.reg.write(octx, hd, in.value, in.tag)
	cancel()
	h.regHist.add(op{holder: h.id, in: in, out: regOutput{status: st}, call: call, ret: h.clk.now()})
}

// resourceStep is a read-modify-write on r, fenced by tok.
func (h *holder) resourceStep(ctx context.Context, r *resource, tok uint64) {
	v, ok := r.read(h.id, tok)
	if !ok {
		return
	}
	h.work(ctx)
	r.write(h.id, tok, v+1, h.nextTag())
}

// work stands for the holder's processing between a read and its write.
func (h *holder) work(ctx context.Context) {
	h.pause(ctx, time.Duration(h.rng.Int64N(int64(maxWork))))
}

// pause waits d or until ctx ends.
func (h *holder) pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
