package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ash-lock/ashlock/backend"
)

// Inspect reports key's holders and waiters as backend.Describe lists
// them, from one read of its queue, after deleting the expired leases of
// its claims (in the same round trip; one that a fenced transaction holds
// is left, and its claims still count). A free key gives Held == false and
// a nil error. Values are the caller's.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	if err := b.closed("inspect"); err != nil {
		return backend.LockInfo{}, err
	}
	if err := backend.CheckKey(key); err != nil {
		return backend.LockInfo{}, err
	}
	q, err := b.readState(ctx, key)
	if err != nil {
		return backend.LockInfo{}, unavailable(ctx, "inspect", err)
	}
	return backend.Describe(key, q, true), nil
}

// readState reads key's queue with everything Describe lists.
func (b *Backend) readState(ctx context.Context, key string) (q []backend.Queued, err error) {
	var batch pgx.Batch
	batch.Queue(b.sql.reapSkip, []string{key})
	batch.Queue(b.sql.inspect, key)
	br := b.pool.SendBatch(ctx, &batch)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var c backend.Queued
		var token, wall, logical int64
		var at *time.Time
		var single bool
		if err := rows.Scan(&token, &c.Kind.Shared, &c.Kind.Permits, &c.Permit, &c.Admitted, &single,
			&c.Owner, &c.Value, &at, &wall, &logical); err != nil {
			return nil, err
		}
		c.Admitted = holds(c, single)
		c.Token = uint64(token)
		c.Stamp = backend.Timestamp{WallTime: wall, Logical: uint32(logical)}
		if at != nil {
			c.AcquiredAt = *at
		}
		q = append(q, c)
	}
	return q, rows.Err()
}

// holds reports whether c, a single-key claim or not, is listed as
// admitted. A single-key claim without permits holds once the rule admits
// it at its key: a waiter's admission record comes a round trip later and
// adds nothing to the store's state, so the handoff from a holder to its
// waiter is one change, as in the rule. Multi-key and counted claims hold
// only once recorded (at every key; with a permit).
func holds(c backend.Queued, single bool) bool {
	return c.Admitted || (single && !c.Kind.Counted())
}

// pause waits a moment before a failed read is tried again; false if ctx
// ended or the Backend closed first.
func (b *Backend) pause(ctx context.Context) bool {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-b.done:
		return false
	}
}
