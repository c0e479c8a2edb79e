package backendtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// observerOf returns the backend under test as a backend.Observer, or nil
// if it does not implement one.
func observerOf(b backend.Backend) backend.Observer {
	if u, ok := b.(unnamed); ok {
		b = u.Backend
	}
	o, _ := b.(backend.Observer)
	return o
}

// observation collects what one Observe yields, from a goroutine.
type observation struct {
	states chan backend.LockInfo
	errs   chan error
	done   chan struct{}
	last   *backend.LockInfo // the last state taken by next
}

func (f *fixture) observe(ctx context.Context, o backend.Observer, key string) *observation {
	ob := &observation{states: make(chan backend.LockInfo, 64), errs: make(chan error, 8), done: make(chan struct{})}
	go func() {
		defer close(ob.done)
		for info, err := range o.Observe(ctx, key) {
			if err != nil {
				ob.errs <- err
				continue
			}
			ob.states <- info
		}
	}()
	return ob
}

// holdersString describes a state's holders by token and value.
func holdersString(info backend.LockInfo) string {
	s := "["
	for i, h := range info.Holders {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%d=%q", h.Token, h.Value)
	}
	return s + "]"
}

func sameState(a, b backend.LockInfo) bool { return holdersString(a) == holdersString(b) }

// next returns the next state that differs from the last one taken (a
// backend may repeat a state), failing the subtest if none comes within
// the timeout.
func (f *fixture) next(ob *observation, what string) backend.LockInfo {
	f.t.Helper()
	deadline := time.After(f.timeout)
	for {
		select {
		case info := <-ob.states:
			if ob.last != nil && sameState(*ob.last, info) {
				continue
			}
			ob.last = &info
			return info
		case err := <-ob.errs:
			f.t.Fatalf("%s: Observe yielded error %v", what, err)
		case <-deadline:
			f.t.Fatalf("%s: Observe yielded no new state within %v", what, f.timeout)
		}
	}
}

// wantState reports an error unless info's holders are exactly one with
// token and value v, or none if token is 0.
func (f *fixture) wantState(info backend.LockInfo, token uint64, v string, what string) {
	f.t.Helper()
	want := "[]"
	if token != 0 {
		want = fmt.Sprintf("[%d=%q]", token, v)
	}
	if got := holdersString(info); got != want || info.Key == "" || info.Held != (token != 0) || info.Token != token {
		f.t.Errorf("%s: Observe yielded holders %s (Key %q Held %v Token %d), want %s", what, got, info.Key, info.Held, info.Token, want)
	}
}

// testObserve checks a backend.Observer (a backend that is not one passes
// trivially): the current state comes first, then every change of the
// holders in order - a new holder, a value set, a handoff to a waiter, a
// lease's end (one change, even with a waiter of the same lease queued) -
// and nothing from other keys; a later observer starts from
// the current state; ctx's end ends an observation without an error, and
// Close makes one yield ErrClosed once.
func testObserve(f *fixture) {
	o := observerOf(f.b)
	if o == nil {
		return
	}
	const key = "observe"
	ctx, cancel := context.WithCancel(f.t.Context())
	defer cancel()
	ob := f.observe(ctx, o, key)
	f.wantState(f.next(ob, "free key"), 0, "", "free key")

	la, lw := f.grant(holdTTL), f.grant(holdTTL)
	a := f.acquire(valued(req(key, la, "A"), "a1"))
	f.wantState(f.next(ob, "A acquired"), a.Token, "a1", "A acquired")
	if err := f.b.SetValue(f.ctx(), a, []byte("a2")); err != nil {
		f.t.Fatalf("SetValue: %v", err)
	}
	f.wantState(f.next(ob, "A's value set"), a.Token, "a2", "A's value set")

	later := f.observe(ctx, o, key)
	f.wantState(f.next(later, "a later observer's first state"), a.Token, "a2", "a later observer's first state")

	w := f.start(valued(req(key, lw, "W"), "w1"))
	f.awaitWaiters(key, "W")
	// Keys around this one: none of their changes is this key's.
	for _, k := range []string{key + "/x", key[:len(key)-1], key + "x"} {
		f.release(f.acquire(req(k, la, "other")))
	}
	f.release(a)
	wc := f.got(w)
	for _, x := range []*observation{ob, later} {
		f.wantState(f.next(x, "handoff to W"), wc.Token, "w1", "handoff to W")
	}
	if err := f.b.Revoke(f.ctx(), lw.ID); err != nil {
		f.t.Fatalf("Revoke: %v", err)
	}
	f.wantState(f.next(ob, "W's lease revoked"), 0, "", "W's lease revoked")

	// A lease's end is one change: a waiter of the same lease behind its
	// holder never shows as the holder on the way.
	ls := f.grant(holdTTL)
	h := f.acquire(valued(req(key, ls, "H"), "h1"))
	f.wantState(f.next(ob, "H acquired"), h.Token, "h1", "H acquired")
	p := f.start(valued(req(key, ls, "P"), "p1"))
	f.awaitWaiters(key, "P")
	if err := f.b.Revoke(f.ctx(), ls.ID); err != nil {
		f.t.Fatalf("Revoke: %v", err)
	}
	f.wantState(f.next(ob, "H's lease, with its waiter P, revoked"), 0, "", "H's lease, with its waiter P, revoked")
	if _, err := f.wait(p, f.timeout); err == nil {
		f.t.Errorf("P acquired although its lease was revoked")
	}

	cancel()
	for _, x := range []*observation{ob, later} {
		select {
		case <-x.done:
		case <-time.After(f.timeout):
			f.t.Fatalf("Observe did not end within %v of its context ending", f.timeout)
		}
		if len(x.errs) > 0 {
			f.t.Errorf("Observe yielded %v when its context ended, want no error", <-x.errs)
		}
	}

	closing := f.observe(f.t.Context(), o, key)
	f.next(closing, "before Close")
	if err := f.b.Close(); err != nil {
		f.t.Fatalf("Close: %v", err)
	}
	select {
	case <-closing.done:
	case <-time.After(f.timeout):
		f.t.Fatalf("Observe did not end within %v of Close", f.timeout)
	}
	if n := len(closing.errs); n != 1 {
		f.t.Fatalf("Observe yielded %d errors after Close, want 1", n)
	}
	if err := <-closing.errs; !errors.Is(err, backend.ErrClosed) {
		f.t.Errorf("Observe after Close yielded %v, want ErrClosed", err)
	}
}
