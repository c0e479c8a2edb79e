package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ash-lock/ashlock/backend"
)

// MinTTL is the shortest lease Grant gives: a shorter TTL is raised to it,
// as etcd raises TTLs below its minimum. A lease shorter than a few round
// trips would end before its holder could use it.
const MinTTL = time.Second

// Grant creates a lease that expires ttl (rounded up to a microsecond,
// and raised to MinTTL) after the server ran the statement, by the
// server's clock, and returns it with the TTL granted. It blocks for one
// round trip.
func (b *Backend) Grant(ctx context.Context, ttl time.Duration) (backend.Lease, error) {
	if err := b.closed("grant"); err != nil {
		return backend.Lease{}, err
	}
	if ttl <= 0 {
		return backend.Lease{}, fmt.Errorf("%w: postgres grant: TTL %v", backend.ErrInvalidConfig, ttl)
	}
	us := (max(ttl, MinTTL) + time.Microsecond - 1) / time.Microsecond
	var id int64
	if err := b.pool.QueryRow(ctx, b.sql.grant, int64(us)).Scan(&id); err != nil {
		return backend.Lease{}, unavailable(ctx, "grant", err)
	}
	return backend.Lease{ID: backend.LeaseID(id), TTL: us * time.Microsecond}, nil
}

// KeepAlive renews a live lease for its TTL from when the server ran the
// statement, and returns that TTL. A lease that has expired by the
// server's clock is never renewed, even if nobody has deleted it yet: the
// error then wraps backend.ErrLeaseExpired, as for a lease that is gone.
// One round trip, one statement, however many claims the lease holds.
func (b *Backend) KeepAlive(ctx context.Context, id backend.LeaseID) (time.Duration, error) {
	if err := b.closed("keepalive"); err != nil {
		return 0, err
	}
	var us, claims int64
	err := b.pool.QueryRow(ctx, b.sql.keepAlive, int64(id)).Scan(&us, &claims)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		b.names.ended(id)
		return 0, fmt.Errorf("%w: postgres keepalive: lease %d expired or revoked", backend.ErrLeaseExpired, id)
	case err != nil:
		return 0, unavailable(ctx, "keepalive", err)
	}
	// More claims than this Backend has under way on the lease: one of
	// them may be a claim nobody holds, which would come to hold its key
	// and never be released.
	if claims > int64(b.names.count(id)) {
		b.removeLeftBehind(ctx, id)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// removeLeftBehind deletes the claims on lease that this Backend named
// and no longer has under way. Such a claim is a late copy of an enqueue
// that reached the server after its Acquire had given up on the reply and
// deleted the claim by name (a partition that healed, a segment
// retransmitted): bound to a lease that lives on, nothing else would
// delete it. Claims named by the caller are left to their lease: the same
// lease may carry claims that another Backend has under way. Each delete
// first locks the claim's keys' rows, as an enqueue does (see cleanup).
// Failures are logged; the next renewal tries again.
func (b *Backend) removeLeftBehind(ctx context.Context, lease backend.LeaseID) {
	rows, err := b.pool.Query(ctx, b.sql.leaseClaims, int64(lease))
	if err != nil {
		b.log.Debug("postgres: reading a lease's claims failed", "lease", int64(lease), "error", err)
		return
	}
	left := map[string][]string{}
	var name string
	var keys []string
	_, err = pgx.ForEachRow(rows, []any{&name, &keys}, func() error {
		left[name] = slices.Clone(keys)
		return nil
	})
	if err != nil {
		b.log.Debug("postgres: reading a lease's claims failed", "lease", int64(lease), "error", err)
		return
	}
	// Read after the rows: a claim is under way before anything of it is
	// sent, so one found and not under way now is done with.
	for name, keys := range left {
		if !b.names.Made(name) || b.names.has(lease, name) {
			continue
		}
		var batch pgx.Batch
		batch.Queue(b.sql.lockKeys, keys)
		batch.Queue(b.sql.cleanup, keys, name)
		if err := b.pool.SendBatch(ctx, &batch).Close(); err != nil {
			b.log.Debug("postgres: deleting a claim left behind failed", "lease", int64(lease), "error", err)
			return
		}
		b.log.Warn("postgres: deleted a claim of the lease that this Backend no longer has under way (left behind by a late enqueue)",
			"key", keys[0], "lease", int64(lease))
	}
}

// Revoke deletes the lease and, by cascade, every claim bound to it; their
// holders learn of it through OnLost. Revoking a lease that is gone is not
// an error. It waits for a transaction that fenced a write with one of
// the lease's claims (see Fence) to end.
func (b *Backend) Revoke(ctx context.Context, id backend.LeaseID) error {
	if err := b.closed("revoke"); err != nil {
		return err
	}
	if _, err := b.pool.Exec(ctx, b.sql.revoke, int64(id)); err != nil {
		return unavailable(ctx, "revoke", err)
	}
	b.names.ended(id)
	return nil
}
