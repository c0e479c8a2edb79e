package postgres

import (
	"cmp"
	"context"
	"errors"
	"iter"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ash-lock/ashlock/backend"
)

// Observation of a key's holders (backend.Observer).
//
// An Observe reads the key's queue once, with the key's newest token as of
// the same snapshot, and from then on applies the listener's events of the
// key to its own copy of the queue, one at a time, in the order the
// listener received them: PostgreSQL delivers notifications in commit
// order, and each carries the row as the change left it (see ddl). After
// each event it computes the holders with backend.Describe, Inspect's
// rule, and yields them if they differ from the last state yielded, so
// every change is reported in order however fast the changes come and
// however slow the consumer is.
//
// The events are registered before the read, so some may predate it. A
// row's ver and the key's tokens tell them apart without any other
// order: an event of a claim the copy has is applied only if its ver is
// newer; an event of a claim the copy lacks, only if its token is above
// the cursor (the key's newest token the copy accounts for: a claim at or
// below it that the copy lacks is gone), since a key's tokens are handed
// out in commit order.
//
// What cannot be followed is read again. When the listener reconnects the
// notifications sent meanwhile are lost: the listener reads the queue of
// every observed key on its new connection, after LISTEN and before any
// notification that follows (not on the pool, which may still be failing
// to connect), and leaves it in each observer's inbox as a gap event;
// the observer takes it as its copy. Changes inside that gap may be
// missed, never reordered (as on etcd after a compaction); the Backend
// reports each such gap to the hook set by WithListenerGapHook. An observer
// that came too late for that read, or whose long value was no longer the
// row's by the time it read it, reads the queue on the pool instead.

// view is one running Observe: the key's queue as of the events applied.
type view struct {
	b      *Backend
	key    string
	claims []entry // in token order
	cursor int64
	last   backend.LockInfo
	yield  func(backend.LockInfo, error) bool
	q      []backend.Queued // scratch for emit
}

// errStopped: the consumer stopped the iteration.
var errStopped = errors.New("postgres observe: stopped")

// Observe implements backend.Observer: it yields key's holders (as Inspect
// reports them, without waiters) now, then again after every event of the
// key's claims that changes them (a claim coming to hold or leaving, a
// holder's value set), in commit order; see above for the listener's
// reconnections. The inbox of events not yet applied is unbounded, as
// etcd's watch buffers are: a consumer slower than the key's changes
// costs memory, not missed states. A failure to reach the server is
// retried with backoff; a refusal by the server is yielded once, last. It
// ends when ctx ends, and yields an error wrapping backend.ErrClosed once
// when the Backend closes.
func (b *Backend) Observe(ctx context.Context, key string) iter.Seq2[backend.LockInfo, error] {
	return func(yield func(backend.LockInfo, error) bool) {
		if err := b.closed("observe"); err != nil {
			yield(backend.LockInfo{}, err)
			return
		}
		if err := backend.CheckKey(key); err != nil {
			yield(backend.LockInfo{}, err)
			return
		}
		o := b.hub.addObserver(key)
		defer b.hub.dropObserver(o)
		v := &view{b: b, key: key, yield: yield}
		err := v.run(ctx, o)
		switch {
		case errors.Is(err, errStopped) || ctx.Err() != nil:
		case b.closed("observe") != nil:
			yield(backend.LockInfo{}, closedError("observe"))
		case err != nil:
			yield(backend.LockInfo{}, err)
		}
	}
}

// run reads the queue, then applies o's events until ctx ends, the
// Backend closes, the consumer stops or a read fails for good.
func (v *view) run(ctx context.Context, o *observer) error {
	if err := v.resync(ctx, true); err != nil {
		return err
	}
	for {
		select {
		case <-o.signal:
		case <-ctx.Done():
			return nil
		case <-v.b.done:
			return nil
		}
		for _, e := range v.b.hub.take(o) {
			if err := v.apply(ctx, e); err != nil {
				return err
			}
		}
	}
}

// apply applies one event to the copy and yields the new state if it
// differs from the last one yielded.
func (v *view) apply(ctx context.Context, e event) error {
	switch e.kind {
	case gap:
		if e.snap != nil {
			v.take(e.snap)
			return v.emit(false)
		}
		// The gap lasts until this read.
		err := v.resync(ctx, false)
		if err == nil && v.b.onGap != nil {
			v.b.onGap(e.lost, time.Now())
		}
		return err
	case 'd':
		v.claims = slices.DeleteFunc(v.claims, func(c entry) bool {
			_, gone := slices.BinarySearch(e.gone, int64(c.q.Token))
			return gone
		})
		return v.emit(false)
	}
	i, found := slices.BinarySearchFunc(v.claims, e.token, func(c entry, t int64) int {
		return cmp.Compare(int64(c.q.Token), t)
	})
	switch {
	case found && e.row.ver <= v.claims[i].ver, !found && e.token <= v.cursor:
		return nil // the copy has this change already, or the claim is gone
	default:
		if e.big {
			val, ok, err := v.readValue(ctx, e)
			if err != nil {
				return err
			}
			if !ok {
				// The row changed or left before its value was read:
				// what it held in between is lost, so read it all.
				return v.resync(ctx, false)
			}
			e.row.q.Value = val
		}
		if found {
			v.claims[i] = e.row
		} else {
			// Above the cursor, so above every token in the copy.
			v.claims = append(v.claims, e.row)
			v.cursor = e.token
		}
	}
	return v.emit(false)
}

// resync replaces the copy with one read of the queue, retried after a
// pause while the server cannot be reached, and yields the state if
// always is set or it differs from the last one yielded.
func (v *view) resync(ctx context.Context, always bool) error {
	for {
		s, err := v.b.readView(ctx, v.key)
		if err == nil {
			v.take(s)
			return v.emit(always)
		}
		if err := v.retry(ctx, err); err != nil {
			return err
		}
	}
}

// take replaces the copy with s, a read no older than any event applied.
func (v *view) take(s *snapshot) {
	v.claims, v.cursor = slices.Clone(s.claims), max(v.cursor, s.last)
}

// readValue reads the value of the row version e names; ok is false if
// the row has changed or left since.
func (v *view) readValue(ctx context.Context, e event) (val []byte, ok bool, err error) {
	for {
		err := v.b.pool.QueryRow(ctx, v.b.sql.observeValue, v.key, e.token, e.row.ver).Scan(&val)
		switch {
		case err == nil:
			return val, true, nil
		case errors.Is(err, pgx.ErrNoRows):
			return nil, false, nil
		}
		if err := v.retry(ctx, err); err != nil {
			return nil, false, err
		}
	}
}

// retry returns nil after a pause if a read that failed with err may be
// tried again, else the error that ends the observation.
func (v *view) retry(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case v.b.closed("observe") != nil:
		return closedError("observe")
	case !transient(err):
		return unavailable(ctx, "observe", err)
	case !v.b.pause(ctx):
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return closedError("observe")
	}
	return nil
}

// emit yields the copy's state if always is set or its holders differ
// from the last state yielded.
func (v *view) emit(always bool) error {
	v.q = v.q[:0]
	for _, c := range v.claims {
		q := c.q
		q.Admitted = holds(q, c.single)
		v.q = append(v.q, q)
	}
	info := backend.Describe(v.key, v.q, false)
	if !always && backend.SameHolders(v.last, info) {
		return nil
	}
	v.last = info
	if !v.yield(info, nil) {
		return errStopped
	}
	return nil
}

// snapshot is a read of one key's queue: its claims in token order and
// the key's newest token as of the same snapshot.
type snapshot struct {
	claims []entry
	last   int64
}

// readView reads key's queue, after deleting the expired leases of its
// claims as Inspect does.
func (b *Backend) readView(ctx context.Context, key string) (s *snapshot, err error) {
	var batch pgx.Batch
	batch.Queue(b.sql.reapSkip, []string{key})
	batch.Queue(b.sql.observe, []string{key})
	br := b.pool.SendBatch(ctx, &batch)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	snaps, err := scanSnapshots(br.Query())
	if err != nil {
		return nil, err
	}
	if s = snaps[key]; s == nil {
		s = &snapshot{}
	}
	return s, nil
}

// scanSnapshots reads the rows of the observe statement, by key; a key
// never claimed has none.
func scanSnapshots(rows pgx.Rows, err error) (map[string]*snapshot, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]*snapshot)
	for rows.Next() {
		var c entry
		var key string
		var last int64
		var token, ver, wall, logical *int64
		var shared, admitted *bool
		var permits, permit *int
		var owner *string
		var at *time.Time
		if err := rows.Scan(&key, &last, &token, &ver, &shared, &permits, &permit, &admitted, &c.single,
			&owner, &c.q.Value, &at, &wall, &logical); err != nil {
			return nil, err
		}
		s := out[key]
		if s == nil {
			s = &snapshot{last: last}
			out[key] = s
		}
		if token == nil {
			continue // an empty queue
		}
		c.ver = *ver
		c.q.Token = uint64(*token)
		c.q.Kind = backend.Kind{Shared: *shared, Permits: *permits}
		c.q.Permit, c.q.Admitted, c.q.Owner = *permit, *admitted, *owner
		c.q.Stamp = backend.Timestamp{WallTime: *wall, Logical: uint32(*logical)}
		if at != nil {
			c.q.AcquiredAt = *at
		}
		s.claims = append(s.claims, c)
	}
	return out, rows.Err()
}
