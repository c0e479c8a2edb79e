package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ash-lock/ashlock/backend"
)

// Acquire creates a claim on req.Key (on every key of req.Keys), bound to
// lease req.Lease and named req.ID (by the Backend when that is empty:
// see names), and returns it once it holds its keys.
//
//   - A fair request (Wait and Fair) joins the keys' queues in one batch,
//     one round trip: it locks the keys' rows, takes the next token,
//     inserts the claim and reads the queues back. A claim that finds
//     every queue empty holds at once; otherwise Acquire applies the
//     queue rule of package backend to what it read, records the
//     admission in one statement that compares on its own rows when the
//     rule admits it, and else waits (see wait).
//   - A request that does not queue (Wait false, or Fair false) inserts
//     its claim in the same batch only if every queue is empty; otherwise
//     it asks the rule whether a claim made now would hold, and if so
//     inserts it, holding, on condition that nothing was queued since it
//     read. With Wait false it fails with backend.ErrLocked when the rule
//     says no; with Fair false it waits for what the rule names and tries
//     again.
//   - With req.Stamp set, the previous stamp of the keys is read and the
//     new one written once the claim holds: two more round trips.
//
// Claims of a lease that has expired by the server's clock count until
// they are deleted: the enqueue deletes such leases of its keys' claims
// unless a fenced transaction holds them, and a waiter deletes the lease
// of a claim it waits for when its time is up.
//
// On failure nothing is left behind: the claim is deleted by name with a
// bounded context of its own, also when the reply to the enqueue was
// lost. Errors wrap backend.ErrInvalidKey or ErrInvalidConfig (bad
// request), ErrPermitMismatch, ErrLocked, ErrLeaseExpired (the lease is
// not live, or the claim was deleted while waiting), ErrUnavailable,
// ErrClosed, the error of req.Stamp, or ctx's error. Safe for concurrent
// use.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Claim, error) {
	if err := b.closed("acquire"); err != nil {
		return backend.Claim{}, err
	}
	if err := backend.CheckRequest(&req); err != nil {
		return backend.Claim{}, err
	}
	switch {
	case req.Lease == 0:
		return backend.Claim{}, fmt.Errorf("%w: postgres acquire %q: no lease", backend.ErrLeaseExpired, req.Key)
	case ctx.Err() != nil:
		return backend.Claim{}, fmt.Errorf("postgres acquire %q: %w", req.Key, backend.ContextError(ctx))
	}
	if req.ID == "" {
		req.ID = b.names.New()
	}
	// Before anything is sent: from now on the lease may have rows of
	// this claim, which a renewal must not take for ones left behind.
	b.names.add(req.Lease, req.ID)
	a := &acquisition{b: b, req: &req, keys: req.AllKeys(), kind: backend.KindOf(&req)}
	a.w = b.hub.addWaiter(a.keys)
	defer b.hub.dropWaiter(a.w)
	c, err := a.run(ctx)
	if err == nil && !b.hub.promote(a.hold) {
		err = a.lostError()
	}
	if err != nil {
		a.discard(ctx, err)
		return backend.Claim{}, err
	}
	return c, nil
}

// acquisition is the state of one Acquire call.
type acquisition struct {
	b    *Backend
	req  *backend.AcquireRequest
	keys []string
	kind backend.Kind
	w    *waiter

	mayExist bool     // rows of the claim may exist: remove them on failure
	hold     *holding // once the claim's rows are known to exist
	// unsure: the listener reconnected after the round that made the
	// claim began, so a delete of its rows may have gone unheard (see
	// hub.hold); its queues must be read again before it is trusted.
	unsure     bool
	token      int64
	permit     int
	acquiredAt time.Time
}

func (a *acquisition) run(ctx context.Context) (backend.Claim, error) {
	var err error
	if a.req.Wait && a.req.Fair {
		err = a.queue(ctx)
	} else {
		err = a.whenFree(ctx)
	}
	if err != nil {
		return backend.Claim{}, err
	}
	var st backend.Timestamp
	if a.req.Stamp != nil {
		if st, err = a.stamp(ctx); err != nil {
			return backend.Claim{}, err
		}
	}
	return backend.Claim{
		Key:        a.req.Key,
		Keys:       a.req.Keys,
		ID:         a.req.ID,
		Lease:      a.req.Lease,
		Token:      uint64(a.token),
		AcquiredAt: a.acquiredAt,
		Stamp:      st,
		Shared:     a.kind.Shared,
		Permits:    a.kind.Permits,
		Permit:     a.permit,
		Value:      bytes.Clone(a.req.Value), // the Backend's copy
	}, nil
}

// queue is the fair path: enqueue, then wait until the rule admits the
// claim at every key and record that.
func (a *acquisition) queue(ctx context.Context) error {
	a.b.hub.begin(a.w)
	res, err := a.enqueue(ctx, insertMode{queue: true})
	if err != nil {
		return err
	}
	if err := a.enqueued(res); err != nil {
		return err
	}
	rows, err := a.recheck(ctx, res.rows)
	if err != nil {
		return err
	}
	for {
		s := a.judge(rows, false)
		switch {
		case s.gone:
			return a.lostError()
		case s.admitted:
			a.permit, a.acquiredAt = s.permit, s.acquiredAt
			return nil
		case s.holds:
			return a.admit(ctx, s.permit)
		}
		if err := a.wait(ctx, s); err != nil {
			return err
		}
		a.b.hub.begin(a.w)
		if rows, err = a.read(ctx); err != nil {
			return err
		}
	}
}

// whenFree is the path of requests that take no place in the queue.
func (a *acquisition) whenFree(ctx context.Context) error {
	a.b.hub.begin(a.w)
	res, err := a.enqueue(ctx, insertMode{})
	for races := 0; ; {
		if err != nil {
			return err
		}
		if res.inserted || !res.live {
			if err := a.enqueued(res); err != nil {
				return err
			}
			rows, err := a.recheck(ctx, res.rows)
			if err != nil {
				return err
			}
			s := a.judge(rows, false)
			if s.gone {
				return a.lostError()
			}
			a.permit, a.acquiredAt = s.permit, s.acquiredAt
			return nil
		}
		if err := a.mismatch(res.rows); err != nil {
			return err
		}
		s := a.judge(res.rows, true)
		if s.holds {
			// Something queued between the read and the insert makes
			// the insert do nothing; a request that may not wait gives
			// up after a few such races.
			if races++; races > 3 && !a.req.Wait {
				return a.lockedError()
			}
			res, err = a.enqueue(ctx, insertMode{now: true, permit: s.permit, after: newest(a.keys, res.rows)})
			continue
		}
		if !a.req.Wait {
			return a.lockedError()
		}
		// No try so far inserted the claim, so it has no rows while it
		// waits (a try held up in the network is still under way by its
		// name, which a renewal spares).
		a.b.names.waitOutside(a.req.Lease, true)
		err = a.wait(ctx, s)
		a.b.names.waitOutside(a.req.Lease, false)
		if err != nil {
			return err
		}
		a.b.hub.begin(a.w)
		rows, rerr := a.read(ctx)
		res, err = enqueueResult{rows: rows, live: true}, rerr
	}
}

// enqueued checks the outcome of an enqueue that was to insert the claim,
// and records the claim with the hub.
func (a *acquisition) enqueued(res enqueueResult) error {
	if !res.live {
		return fmt.Errorf("%w: postgres acquire %q: lease %d expired or revoked", backend.ErrLeaseExpired, a.req.Key, a.req.Lease)
	}
	if !res.inserted {
		if err := a.mismatch(res.rows); err != nil {
			return err
		}
		return fmt.Errorf("%w: postgres acquire %q: the claim was not inserted", backend.ErrUnavailable, a.req.Key)
	}
	for _, r := range res.rows {
		if r.name == a.req.ID && r.key == a.req.Key {
			a.token = r.token
		}
	}
	h := &holding{name: a.req.ID, onLost: a.req.OnLost}
	for _, k := range a.keys {
		h.refs = append(h.refs, ref{key: k, token: a.token})
	}
	a.hold = h
	a.unsure = a.b.hub.hold(h, a.w)
	return nil
}

// recheck returns rows, the queues the enqueue read, or, if the claim is
// unsure, the queues read again: the claim is now known to the hub, so a
// later delete reaches it, by event or by the checks of a reconnection.
func (a *acquisition) recheck(ctx context.Context, rows []queued) ([]queued, error) {
	if !a.unsure {
		return rows, nil
	}
	a.b.hub.begin(a.w)
	return a.read(ctx)
}

// mismatch returns ErrPermitMismatch if a claim queued at one of the keys
// has another permit count than the request.
func (a *acquisition) mismatch(rows []queued) error {
	for _, r := range rows {
		if r.kind.Permits != a.kind.Permits {
			return fmt.Errorf("postgres acquire %q (%d permits): the key's claims have %d: %w",
				r.key, a.kind.Permits, r.kind.Permits, backend.ErrPermitMismatch)
		}
	}
	return nil
}

// admit records that the claim holds its keys, with permit p.
func (a *acquisition) admit(ctx context.Context, p int) error {
	var n int
	err := a.retry(ctx, "admit", func() error {
		rows, err := a.b.pool.Query(ctx, a.b.sql.admit, a.keys, a.token, a.req.ID, p, int64(a.req.Lease))
		if err != nil {
			return err
		}
		n = 0
		for rows.Next() {
			if err := rows.Scan(&a.acquiredAt); err != nil {
				rows.Close()
				return err
			}
			n++
		}
		return rows.Err()
	})
	if err != nil {
		return err
	}
	if n != len(a.keys) {
		return a.lostError()
	}
	a.permit = max(p, 0)
	return nil
}

// discard removes whatever the failed acquisition may have left in the
// store, by name, with a context of its own: the caller's has often ended.
// When the server did not answer in time (ctx ended, or it was out of
// reach) the removal goes on in the background, again with backoff until
// it succeeds or the Backend closes, so that the caller is not kept past
// its deadline and the rows never outlive their lease's renewals for
// good; otherwise Acquire returns once it is done.
func (a *acquisition) discard(ctx context.Context, err error) {
	if a.hold != nil {
		a.b.hub.leave(a.hold)
	}
	if !a.mayExist {
		a.forget()
		return
	}
	if ctx.Err() == nil && !errors.Is(err, backend.ErrUnavailable) && a.cleanup() == nil {
		a.forget()
		return
	}
	if !a.b.spawn(func() {
		defer a.forget()
		backend.Retry(a.b.done, true, func() bool { return a.cleanup() == nil })
	}) {
		a.forget()
	}
}

// cleanup deletes the acquisition's rows by name, once. It first locks
// the keys' rows as an enqueue does, in one batch: an enqueue of ours
// that is still inside the server (waiting for those rows, its reply
// lost and its cancel request too) commits before the delete looks, so
// the delete finds its claim instead of finding nothing while the claim
// is yet to commit, and then stays behind for as long as its lease lives.
func (a *acquisition) cleanup() error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var batch pgx.Batch
	batch.Queue(a.b.sql.lockKeys, a.keys)
	batch.Queue(a.b.sql.cleanup, a.keys, a.req.ID)
	return a.b.pool.SendBatch(ctx, &batch).Close()
}

func (a *acquisition) forget() {
	if a.hold != nil {
		a.b.hub.forget(a.hold)
	}
	a.b.names.done(a.req.Lease, a.req.ID)
}

// retry runs f, again after a failure to reach the server, with backoff,
// until it succeeds, fails otherwise, or ctx ends or the Backend closes.
// While the server is out of reach the claim keeps its place as long as
// its lease lives; the client ends ctx once it stops trusting the lease.
func (a *acquisition) retry(ctx context.Context, op string, f func() error) error {
	for d := minBackoff; ; d = min(2*d, maxBackoff) {
		err := f()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !transient(err) {
			return unavailable(ctx, "acquire "+op, err)
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return unavailable(ctx, "acquire "+op, err)
		case <-a.b.done:
			t.Stop()
			return closedError("acquire")
		}
	}
}

// transient reports whether err is a failure to reach the server rather
// than the server's refusal.
func transient(err error) bool {
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		code := pe.SQLState()
		return code == deadlockDetected || strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57")
	}
	return !errors.Is(err, pgx.ErrNoRows)
}

func (a *acquisition) lostError() error {
	return fmt.Errorf("%w: postgres acquire %q: the claim vanished (lease ended or deleted)", backend.ErrLeaseExpired, a.req.Key)
}

func (a *acquisition) lockedError() error {
	return fmt.Errorf("postgres acquire %q: %w", a.req.Key, backend.ErrLocked)
}
