//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/ash-lock/ashlock"
)

// held is a lock ashlock holds and the client it came from.
type held struct {
	client *ashlock.LockClient
	guard  *ashlock.Guard
}

// release unlocks and closes the client, each bounded by a timeout of its
// own so that a dead backend cannot keep ashlock from exiting. If the
// release fails, Close revokes the client's lease; if that fails too, the
// claim lapses when its TTL runs out.
func (h *held) release(e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	// A lost lock has been reported already; Unlock still removes the
	// claim if the store has it, and its ErrLeaseExpired adds nothing.
	if err := h.guard.Unlock(ctx); err != nil && !errors.Is(err, ashlock.ErrLeaseExpired) {
		e.errorf("releasing %q: %v", h.guard.Key(), err)
	}
	closeClient(e, h.client)
}

// releaseUnlessSignalled releases h as release does, unless a signal that
// cancelsWait comes first: then it reports on stderr that it stops waiting
// and returns. Other signals are dropped, there being no command to pass
// them to.
//
// An abandoned release goes on in the background only until ashlock
// exits, which its caller does at once. The claim lapses within its TTL
// anyway, since the exit also ends the lease's renewals: whoever signals
// ashlock here (a user, a service manager stopping it) gains nothing by
// its waiting up to twice cleanupTimeout for a backend that does not
// answer.
func (h *held) releaseUnlessSignalled(o runOptions, e *env, sigs <-chan os.Signal) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.release(e)
	}()
	for {
		select {
		case <-done:
			return
		case s := <-sigs:
			if !cancelsWait(s) {
				continue
			}
			// A release that ended as the signal came has nothing left to
			// abandon: say nothing about it.
			select {
			case <-done:
				return
			default:
			}
			e.errorf("%q: SIG%s: not waiting for the release; the lock lapses within its TTL (%v)", o.key, signalName(s), o.ttl)
			return
		}
	}
}

// errInterrupted is the cancellation cause when a signal abandons the wait.
var errInterrupted = errors.New("interrupted by a signal")

// obtain connects and takes the lock. A signal that cancelsWait abandons
// the attempt; others are dropped, there being no command yet to pass them
// to. It returns the held lock, or nil and the exit code after reporting
// why on stderr.
func obtain(o runOptions, e *env, sigs <-chan os.Signal) (*held, int) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	type result struct {
		h   *held
		err error
	}
	// Connect and Acquire block, so they run aside while this goroutine
	// watches for signals; a lock granted just as a signal arrived is
	// released, not leaked.
	r, caught := untilSignal(sigs, func() { cancel(errInterrupted) }, func() result {
		h, err := o.lock(ctx, e)
		return result{h, err}
	})
	switch {
	case caught != nil:
		if r.h != nil {
			r.h.releaseUnlessSignalled(o, e, sigs)
		}
		if !o.quiet {
			e.errorf("%q: not acquired: wait cancelled by SIG%s", o.key, signalName(caught))
		}
		return nil, exitNotAcquired
	case r.err != nil:
		code := acquireExitCode(r.err)
		if code != exitNotAcquired || !o.quiet {
			e.errorf("%s", describeAcquireError(o, r.err))
		}
		return nil, code
	}
	return r.h, exitOK
}

// lock connects and acquires as o asks. On failure nothing is left open.
func (o runOptions) lock(ctx context.Context, e *env) (*held, error) {
	client, err := connect(ctx, e, o.commonFlags)
	if err != nil {
		return nil, err
	}
	b := client.Lock(o.key).WithTTL(o.ttl)
	if o.owner != "" {
		b = b.WithOwner(o.owner)
	}
	if o.shared {
		b = b.Shared()
	}
	if o.permits != 1 {
		b = b.WithPermits(o.permits)
	}
	if o.value != "" {
		b = b.WithValue([]byte(o.value))
	}
	actx, cancel := ctx, context.CancelFunc(func() {})
	switch {
	case o.timeout > 0:
		actx, cancel = context.WithTimeout(ctx, o.timeout)
	case o.try:
		// One round trip: bound it like the connection, so that a backend
		// that stops answering cannot hang a cron job.
		actx, cancel = context.WithTimeout(ctx, o.connectTimeout)
	}
	defer cancel()
	var g *ashlock.Guard
	if o.try {
		g, err = b.TryAcquire(actx)
		if errors.Is(err, context.DeadlineExceeded) && o.timeout == 0 {
			err = fmt.Errorf("%w: no answer within --connect-timeout %v: %w", ashlock.ErrUnavailable, o.connectTimeout, err)
		}
	} else {
		g, err = b.Acquire(actx)
	}
	if err != nil {
		if errors.Is(err, ashlock.ErrPermitMismatch) {
			err = o.explainMismatch(ctx, client, err)
		}
		closeClient(e, client)
		return nil, err
	}
	return &held{client: client, guard: g}, nil
}

// explainMismatch adds to an ErrPermitMismatch the permit count the key's
// other claims use, read with one Inspect bounded like the connection. If
// that read fails, or the queue has changed meanwhile, err is returned as
// it is: the count is a help, not the point.
func (o runOptions) explainMismatch(ctx context.Context, client *ashlock.LockClient, err error) error {
	ctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
	defer cancel()
	info, ierr := client.Inspect(ctx, o.key)
	if ierr != nil || info.Permits == 0 || info.Permits == o.permits {
		return err
	}
	return &mismatchError{err: err, theirs: info.Permits}
}

// mismatchError is an ErrPermitMismatch with the key's permit count.
type mismatchError struct {
	err    error
	theirs int
}

func (m *mismatchError) Error() string { return m.err.Error() }
func (m *mismatchError) Unwrap() error { return m.err }

// ownKind describes o's claim as the permit comparison sees it.
func (o runOptions) ownKind() string {
	switch {
	case o.permits > 1:
		return fmt.Sprintf("--permits %d", o.permits)
	case o.shared:
		return "--shared (one permit)"
	}
	return "a plain lock (one permit)"
}

// describeAcquireError says in words why the lock was not taken.
func describeAcquireError(o runOptions, err error) string {
	switch {
	case errors.Is(err, ashlock.ErrLocked):
		return fmt.Sprintf("%q: not acquired: held elsewhere (--try)", o.key)
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ashlock.ErrUnavailable):
		return fmt.Sprintf("%q: not acquired within --timeout %v", o.key, o.timeout)
	case errors.Is(err, ashlock.ErrPermitMismatch):
		theirs := "another permit count"
		if m, ok := errors.AsType[*mismatchError](err); ok {
			theirs = fmt.Sprintf("%d permits", m.theirs)
		}
		return fmt.Sprintf("%q: not acquired: this run asks for %s, but the runs holding or queued on the key use %s; "+
			"every run of a key must give the same --permits (plain and --shared runs count as 1)", o.key, o.ownKind(), theirs)
	}
	return fmt.Sprintf("%q: %s", o.key, errText(err))
}
