package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ash-lock/ashlock/backend"
)

// queued is one row of a key's queue as the Backend reads it to decide
// admission: no values, and the time left on the claim's lease by the
// server's clock (negative once it has expired: the claim still counts
// until deleted).
type queued struct {
	key        string
	token      int64
	name       string
	lease      int64
	kind       backend.Kind
	permit     int
	admitted   bool
	acquiredAt *time.Time
	remaining  time.Duration
}

// insertMode says how the enqueue's insert behaves (see statements.insert).
type insertMode struct {
	queue  bool    // fair: always insert
	now    bool    // the rule found that a claim made now holds, with permit
	permit int     // the permit it takes
	after  []int64 // with now: the newest token seen at each key
}

// enqueueResult is what an enqueue found.
type enqueueResult struct {
	inserted bool
	affected int64 // rows the insert made
	live     bool  // the request's lease is live
	rows     []queued
}

// enqueue sends the enqueue batch (see statements): one implicit
// transaction, one round trip. A deadlock the server broke is tried again:
// the server rolled the batch back entirely.
func (a *acquisition) enqueue(ctx context.Context, m insertMode) (enqueueResult, error) {
	for attempt := 1; ; attempt++ {
		res, err := a.enqueueOnce(ctx, m)
		if err != nil && isCode(err, deadlockDetected) && attempt < 5 && ctx.Err() == nil {
			continue
		}
		if err != nil && isCode(err, foreignKeyViolation) {
			// The lease was deleted between the insert's check and its
			// foreign key's: nothing was committed.
			return enqueueResult{}, nil
		}
		if err != nil {
			return enqueueResult{}, unavailable(ctx, "acquire "+a.req.Key, err)
		}
		if res.affected == 0 {
			// The whole reply came: this batch inserted nothing, and an
			// earlier one of this Acquire either inserted nothing or
			// ended it. A refused request has nothing to clean up.
			a.mayExist = false
		}
		return res, nil
	}
}

func (a *acquisition) enqueueOnce(ctx context.Context, m insertMode) (res enqueueResult, err error) {
	s := &a.b.sql
	var keysCol []string
	if a.req.Keys != nil {
		keysCol = a.keys
	}
	var batch pgx.Batch
	batch.Queue(s.lockKeys, a.keys)
	batch.Queue(s.bumpToken, a.keys)
	batch.Queue(s.reapSkip, a.keys)
	batch.Queue(s.insert, a.keys, int64(a.req.Lease), a.req.ID, a.kind.Shared, a.kind.Permits,
		a.req.Owner, a.req.Value, keysCol, m.queue, m.after, m.now, m.permit)
	batch.Queue(s.readQueue, a.keys)
	batch.Queue(s.status, int64(a.req.Lease))
	// The batch may commit even if its reply is lost: clean up by name.
	a.mayExist = true
	br := a.b.pool.SendBatch(ctx, &batch)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	for range 3 {
		if _, err := br.Exec(); err != nil {
			return res, err
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return res, err
	}
	res.affected = tag.RowsAffected()
	res.inserted = res.affected == int64(len(a.keys))
	if res.rows, err = scanQueue(br.Query()); err != nil {
		return res, err
	}
	err = br.QueryRow().Scan(&res.live)
	return res, err
}

// read reads the keys' queues again.
func (a *acquisition) read(ctx context.Context) ([]queued, error) {
	var rows []queued
	err := a.retry(ctx, "read", func() error {
		var err error
		rows, err = scanQueue(a.b.pool.Query(ctx, a.b.sql.readQueue, a.keys))
		return err
	})
	return rows, err
}

func scanQueue(rows pgx.Rows, err error) ([]queued, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []queued
	for rows.Next() {
		var q queued
		var us int64
		if err := rows.Scan(&q.key, &q.token, &q.name, &q.lease, &q.kind.Shared, &q.kind.Permits,
			&q.permit, &q.admitted, &q.acquiredAt, &us); err != nil {
			return nil, err
		}
		q.remaining = time.Duration(us) * time.Microsecond
		out = append(out, q)
	}
	return out, rows.Err()
}

// newest returns, for each key, the highest token among rows at it (0 if
// none).
func newest(keys []string, rows []queued) []int64 {
	out := make([]int64, len(keys))
	for i, k := range keys {
		for _, r := range rows {
			if r.key == k {
				out[i] = max(out[i], r.token)
			}
		}
	}
	return out
}
