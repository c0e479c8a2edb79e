package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"time"
)

// callTimeout bounds a child's wait for the parent's answer. The parent
// answers at once; only a parent that died leaves it waiting.
const callTimeout = 30 * time.Second

// childProbeEvery is how often a child re-checks its guard while it holds
// it. Each check is a round trip to the parent, so it is less frequent
// than an in-process holder's.
const childProbeEvery = 10 * time.Millisecond

// probeAfterDone marks a "probed" message whose check was made after the
// guard's Done had been seen closed (Kind).
const probeAfterDone = "done"

// childOwner starts the owner label of every child's claims.
const childOwner = "child-"

// worker is a lock holder in a child process: the test binary re-executed
// with workerEnv set. It takes the lock with ashlock through its route's
// proxies, does the same steps as an in-process holder, and reaches the
// resource - and the parent's clock - over its pipes. The parent freezes it
// with SIGSTOP, so its late writes arrive after other holders' writes.
type worker struct {
	cfg  workerConfig
	io   *pipe
	conn conn
	reg  register // the mutex workload's
	lk   locker
	lib  *libLocker // lk, unless the child trusts an etcd session (control)
	rng  *rand.Rand
	stop chan struct{} // closed on "stop" or when the parent is gone

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan message

	seq   int
	steps int64
	stuck bool // a prober did not stop
}

// workerMain runs a child holder and returns its exit code.
func workerMain() int {
	c := newPipe(os.Stdin, os.Stdout)
	first, err := c.recv()
	if err != nil || first.T != "cfg" || first.Config == nil {
		fmt.Fprintf(os.Stderr, "worker: want a cfg message first, got %+v, %v\n", first, err)
		return 2
	}
	if err := runWorker(c, *first.Config); err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: %v\n", first.Config.ID, err)
		return 1
	}
	return 0
}

func runWorker(c *pipe, cfg workerConfig) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cn, err := openConn(ctx, cfg.Conn)
	if err != nil {
		return err
	}
	var lk locker
	var lib *libLocker
	var reg register
	if cfg.Session {
		// The control's sessions are etcd's.
		lk = newSessionLocker(cn.(*etcdConn).cli, cfg.Prefix+"session/", cfg.TTL)
		reg = cn.register(nil, cfg.RegKey, cfg.Key, cfg.Unguarded)
	} else {
		lib, err = newLibLocker(ctx, cn, cfg.Prefix, cfg.Key, fmt.Sprintf("%s%d", childOwner, cfg.ID), cfg.TTL, cfg.Fair)
		if err != nil {
			return errors.Join(err, cn.close())
		}
		if cfg.Workload == wlPermits {
			lib.withPermits(cfg.Permits)
		}
		lk = lib
		reg = cn.register(lib.be, cfg.RegKey, cfg.Key, cfg.Unguarded)
	}
	w := &worker{
		cfg: cfg, io: c, conn: cn, reg: reg, lk: lk, lib: lib,
		rng:     rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID))),
		stop:    make(chan struct{}),
		pending: make(map[uint64]chan message),
	}
	go w.dispatch()
	go func() {
		<-w.stop
		cancel()
	}()
	if err := c.send(message{T: "ready"}); err != nil {
		return err
	}
	w.run(ctx)
	cctx, ccancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer ccancel()
	err = errors.Join(lk.close(cctx), cn.close())
	if w.stuck {
		err = errors.Join(err, errors.New("a prober did not stop"))
	}
	return errors.Join(err, c.send(message{T: "bye", Value: w.steps}))
}

// dispatch hands the parent's answers to the waiting calls and closes
// stop on "stop" or when stdin ends.
func (w *worker) dispatch() {
	defer close(w.stop)
	for {
		m, err := w.io.recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(os.Stderr, "worker %d: %v\n", w.cfg.ID, err)
			}
			return
		}
		if m.T == "stop" {
			return
		}
		w.mu.Lock()
		ch := w.pending[m.ID]
		delete(w.pending, m.ID)
		w.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// call sends m with a fresh ID and waits for the answer.
func (w *worker) call(m message) (message, error) {
	ch := make(chan message, 1)
	w.mu.Lock()
	w.nextID++
	m.ID = w.nextID
	w.pending[m.ID] = ch
	w.mu.Unlock()
	if err := w.io.send(m); err != nil {
		return message{}, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-w.stop:
		return message{}, errors.New("stopped")
	case <-time.After(callTimeout):
		return message{}, fmt.Errorf("no answer to %s within %v", m.T, callTimeout)
	}
}

func (w *worker) run(ctx context.Context) {
	if w.cfg.Workload == wlElection {
		w.runElection(ctx)
		return
	}
	for ctx.Err() == nil {
		// The parent takes the call time before it answers, so the
		// recorded time is no later than Acquire's call.
		if _, err := w.call(message{T: "acall"}); err != nil {
			return
		}
		actx, cancel := context.WithTimeout(ctx, acquireTimeout)
		var hd held
		var err error
		if w.cfg.Workload == wlTransfer {
			hd, err = w.lib.acquireAll(actx, pickAccounts(w.rng, w.cfg.Accounts))
		} else {
			hd, err = w.lk.acquire(actx)
		}
		cancel()
		if err != nil {
			w.pause(ctx, time.Duration(w.rng.Int64N(int64(retryPause))))
			continue
		}
		sw, sl, hs := hd.stamp()
		_ = w.io.send(message{T: "acq", Token: hd.token(), StampW: sw, StampL: sl, HasStamp: hs, Permit: hd.permit(), Keys: hd.keys()})
		stop, stopped := make(chan struct{}), make(chan struct{})
		go w.probe(hd, stop, stopped)
		w.critical(ctx, hd)
		close(stop)
		select {
		case <-stopped:
		case <-time.After(2 * callTimeout):
			// The prober's calls end within callTimeout, so this is a bug
			// here; the child's exit status tells the parent.
			w.stuck = true
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		_ = hd.release(rctx)
		cancel()
	}
}

// check is a check of the guard timed on the parent's clock (see
// timedCheck). A check made after Done was seen closed is reported as
// such: it must fail.
func (w *worker) check(hd held) (bool, error) {
	return w.timedCheck(func() (bool, string) {
		doneSeen := closed(hd.done())
		ok := hd.valid()
		if doneSeen {
			return ok, probeAfterDone
		}
		return ok, ""
	})
}

// timedCheck makes one check of the child's belief timed on the parent's
// clock: the parent takes the time before it answers the probe, and check
// runs only after the answer, so a success reported means the child
// believed at that time or later. check returns the outcome and the kind
// of the "probed" message that reports it.
func (w *worker) timedCheck(check func() (ok bool, kind string)) (bool, error) {
	g, err := w.call(message{T: "probe"})
	if err != nil {
		return false, err
	}
	ok, kind := check()
	return ok, w.io.send(message{T: "probed", ID: g.ID, OK: ok, Kind: kind})
}

// probe mirrors holder.probe: it re-checks the guard every
// childProbeEvery until stop closes or a check fails, and makes one more
// check once Done has closed.
func (w *worker) probe(hd held, stop <-chan struct{}, stopped chan<- struct{}) {
	probeLoop(hd.done(), childProbeEvery, stop, stopped, func(bool) bool {
		ok, err := w.check(hd)
		return err == nil && ok
	})
}

// closed reports whether c is closed, without waiting.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// critical mirrors holder.critical, with each check timed by the parent.
func (w *worker) critical(ctx context.Context, hd held) {
	until := time.Now().Add(span{w.cfg.MinHold, w.cfg.MaxHold}.draw(w.rng))
	for first := true; first || time.Now().Before(until); first = false {
		if ctx.Err() != nil {
			return
		}
		if ok, err := w.check(hd); err != nil || !ok {
			return
		}
		if w.step(ctx, hd) != nil {
			return
		}
		w.steps++
	}
}

// step is one step of the child's workload, as the workloads' step
// methods do it in this process.
func (w *worker) step(ctx context.Context, hd held) error {
	switch w.cfg.Workload {
	case wlPermits:
		return w.resourceStep(ctx, permitResource(hd.permit()), hd.token())
	case wlTransfer:
		return w.transferStep(ctx, hd)
	}
	if err := w.registerStep(ctx, hd); err != nil {
		return err
	}
	return w.resourceStep(ctx, "", hd.token())
}

func (w *worker) nextTag() string {
	w.seq++
	return fmt.Sprintf("c%d-%d", w.cfg.ID, w.seq)
}

func (w *worker) registerStep(ctx context.Context, hd held) error {
	tok := hd.token()
	g, err := w.call(message{T: "rbegin", Kind: "read", Token: tok})
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	v, st := w.reg.read(octx, hd)
	cancel()
	if err := w.io.send(message{T: "rend", ID: g.ID, Status: statusName(st), Value: v}); err != nil {
		return err
	}
	if st != statusOK {
		return nil
	}
	w.work(ctx)
	tag := w.nextTag()
	g, err = w.call(message{T: "rbegin", Kind: "write", Token: tok, Value: v + 1, Tag: tag})
	if err != nil {
		return err
	}
	octx, cancel = context.WithTimeout(ctx, opTimeout)
	st = w.reg.write(octx, hd, v+1, tag)
	cancel()
	return w.io.send(message{T: "rend", ID: g.ID, Status: statusName(st)})
}

// resourceStep is a read-modify-write on the parent's resource res ("" for
// the mutex workload's).
func (w *worker) resourceStep(ctx context.Context, res string, tok uint64) error {
	r, err := w.call(message{T: "rread", Res: res, Token: tok})
	if err != nil || !r.OK {
		return err
	}
	w.work(ctx)
	_, err = w.call(message{T: "rwrite", Res: res, Token: tok, Value: r.Value + 1, Tag: w.nextTag()})
	return err
}

// transferStep mirrors transferWorkload.step over the pipe.
func (w *worker) transferStep(ctx context.Context, hd held) error {
	keys, tok := hd.keys(), hd.token()
	r, err := w.call(message{T: "tread", Token: tok, Keys: keys})
	if err != nil || !r.OK {
		return err
	}
	w.work(ctx)
	_, err = w.call(message{T: "twrite", Token: tok, Keys: keys, Values: moveMoney(w.rng, r.Values), Tag: w.nextTag()})
	return err
}

func (w *worker) work(ctx context.Context) {
	w.pause(ctx, time.Duration(w.rng.Int64N(int64(maxWork))))
}

func (w *worker) pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
