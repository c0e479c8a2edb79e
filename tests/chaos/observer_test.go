package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
)

// observerTimeout bounds the observer's waits: for its first state, for
// catching up at the end (the candidates have resigned by then, or their
// leases run out within the TTL), and for its goroutine to end.
const observerTimeout = 15 * time.Second

// observed is one state Election.Observe yielded, with when it was
// yielded on the run's clock.
type observed struct {
	token uint64
	owner string
	value string
	at    int64
}

// observer watches the election from this process, with a client of its
// own through a route of its own (so client faults reach it too), and
// records every state Observe yields. If the sequence ends with an error
// (which it must not while the client is open) the error is recorded and
// Observe is called again.
type observer struct {
	clk     clock
	conn    conn
	be      backend.Backend
	client  *ashlock.LockClient
	cancel  context.CancelFunc
	done    chan struct{} // closed when the observing goroutine ends
	changed chan struct{} // cap 1: something was recorded

	mu       sync.Mutex
	seen     []observed
	problems []string
	stopped  bool
	gaps     []listenerGap // reported by the observer's Backend (PostgreSQL, Redis)
}

// startObserver connects through r and starts observing electionName. It
// returns once the first state (nobody leads yet) has been yielded, so
// that no term of the run can begin before the observer watches.
func startObserver(ctx context.Context, r route, prefix string, clk clock) (*observer, error) {
	cn, err := openConn(ctx, r.endpoint())
	if err != nil {
		return nil, err
	}
	o := &observer{clk: clk, conn: cn, done: make(chan struct{}), changed: make(chan struct{}, 1)}
	onGap := func(from, to time.Time) {
		g := listenerGap{from: int64(from.Sub(clk.start)), to: int64(to.Sub(clk.start))}
		o.record(func() { o.gaps = append(o.gaps, g) })
	}
	switch c := cn.(type) {
	case *pgConn:
		c.onGap = onGap
	case *redisConn:
		c.onGap = onGap
	}
	if o.be, err = cn.newBackend(ctx, prefix); err != nil {
		return nil, errors.Join(err, cn.close())
	}
	o.client, err = ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: ttl, Logger: slog.New(slog.DiscardHandler)}, o.be)
	if err != nil {
		return nil, errors.Join(err, o.be.Close(), cn.close())
	}
	octx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	go o.run(octx, o.client.Election(electionName))
	if !o.waitFor(func() bool { return len(o.seen) > 0 }, observerTimeout) {
		return o, errors.Join(fmt.Errorf("observer: no first state within %v", observerTimeout), o.stop(0))
	}
	return o, nil
}

func (o *observer) run(ctx context.Context, el *ashlock.Election) {
	defer close(o.done)
	for ctx.Err() == nil {
		for l, err := range el.Observe(ctx) {
			if err != nil {
				o.record(func() { o.problems = append(o.problems, fmt.Sprintf("observer: Observe yielded %v", err)) })
				break
			}
			at := o.clk.now()
			o.record(func() {
				o.seen = append(o.seen, observed{token: l.Token, owner: l.Owner, value: string(l.Value), at: at})
			})
		}
		if ctx.Err() != nil {
			return
		}
		o.record(func() { o.problems = append(o.problems, "observer: Observe ended before its context; observing again") })
		t := time.NewTimer(retryPause)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// listenerGaps returns the gaps the observer's Backend reported.
func (o *observer) listenerGaps() []listenerGap {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]listenerGap(nil), o.gaps...)
}

func (o *observer) record(f func()) {
	o.mu.Lock()
	f()
	o.mu.Unlock()
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until cond (called with mu held) holds, at most d.
func (o *observer) waitFor(cond func() bool, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		ok := cond()
		o.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-o.changed:
		case <-o.done:
			o.mu.Lock()
			ok := cond()
			o.mu.Unlock()
			return ok
		case <-deadline.C:
			return false
		}
	}
}

// stop waits until the observer has caught up - it has seen a term at
// least last (the highest that wrote) and then "no leader", as it must
// once every candidate has stopped - then ends it and closes its client.
// Not catching up is recorded as a problem; only a goroutine that does
// not end, or a close that fails, is returned. Idempotent.
func (o *observer) stop(last uint64) error {
	o.mu.Lock()
	if o.stopped {
		o.mu.Unlock()
		return nil
	}
	o.stopped = true
	o.mu.Unlock()
	caught := o.waitFor(func() bool {
		n := len(o.seen)
		return n > 0 && o.seen[n-1].token == 0 && maxObserved(o.seen) >= last
	}, observerTimeout)
	if !caught {
		o.record(func() {
			o.problems = append(o.problems, fmt.Sprintf("observer: did not see term %d and then no leader within %v of the candidates' end", last, observerTimeout))
		})
	}
	o.cancel()
	var errs []error
	select {
	case <-o.done:
	case <-time.After(observerTimeout):
		errs = append(errs, fmt.Errorf("observer: Observe did not end within %v of its context", observerTimeout))
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	errs = append(errs, o.client.Close(ctx), o.be.Close(), o.conn.close())
	return errors.Join(errs...)
}

// snapshot returns what the observer recorded.
func (o *observer) snapshot() ([]observed, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]observed(nil), o.seen...), append([]string(nil), o.problems...)
}

func maxObserved(seen []observed) uint64 {
	var m uint64
	for _, s := range seen {
		m = max(m, s.token)
	}
	return m
}

// lastTerm returns the highest term whose write reg admitted or whose lead
// was called (0 if none).
func lastTerm(reg *resource, acqs *acquisitions) uint64 {
	var t uint64
	for _, o := range reg.hist.snapshot() {
		if o.in.kind == opWrite && o.out.status == statusOK {
			t = max(t, o.in.token)
		}
	}
	for _, a := range acqs.snapshot() {
		t = max(t, a.token)
	}
	return t
}
