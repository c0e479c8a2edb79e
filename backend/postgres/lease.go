package postgres

import (
	"context"
	"errors"
	"fmt"
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
	var us int64
	err := b.pool.QueryRow(ctx, b.sql.keepAlive, int64(id)).Scan(&us)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("%w: postgres keepalive: lease %d expired or revoked", backend.ErrLeaseExpired, id)
	case err != nil:
		return 0, unavailable(ctx, "keepalive", err)
	}
	return time.Duration(us) * time.Microsecond, nil
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
	return nil
}
