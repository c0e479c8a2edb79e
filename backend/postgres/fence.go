package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ash-lock/ashlock/backend"
)

// Fence checks, inside the caller's transaction tx, that the claim with
// this token still holds key: its row exists, records its admission, and
// its lease has not expired by the server's clock. It returns nil only
// then, and from then until tx ends no other claim can come to hold key,
// so a write made in tx commits only under the lock. Otherwise it returns
// an error wrapping backend.ErrLeaseExpired (or ErrUnavailable, or ctx's
// error, if the statement failed; tx is then aborted, as after any failed
// statement).
//
// How: the check locks the claim's row and its lease's row FOR KEY SHARE
// until tx ends. Every way a claim leaves - its Release, an operator's
// DELETE of it, the revoke or the reap of its expired lease, which
// deletes the lease row and cascades - is a DELETE of one of those rows,
// and waits for tx; and no claim behind it is admitted while its row is
// there, expired lease or not. A renewal only updates expires_at, which
// FOR KEY SHARE does not block, so holding tx open does not stop the
// lease being kept alive. A transaction that stays open past the lease's
// expiry delays the next holder until it ends.
//
// tx must be on the Backend's database (any connection to it), in READ
// COMMITTED or a stricter isolation level; under REPEATABLE READ or
// SERIALIZABLE, take the snapshot's first statement to be Fence. One
// round trip.
func (b *Backend) Fence(ctx context.Context, tx pgx.Tx, key string, token uint64) error {
	var one int
	return b.fenced(ctx, key, token, tx.QueryRow(ctx, b.sql.fence, key, int64(token)).Scan(&one))
}

// FenceSQL is Fence for a database/sql transaction (for example one of
// pgx's stdlib driver, or lib/pq).
func (b *Backend) FenceSQL(ctx context.Context, tx *sql.Tx, key string, token uint64) error {
	var one int
	return b.fenced(ctx, key, token, tx.QueryRowContext(ctx, b.sql.fence, key, int64(token)).Scan(&one))
}

func (b *Backend) fenced(ctx context.Context, key string, token uint64, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: postgres fence %q: token %d no longer holds the key", backend.ErrLeaseExpired, key, token)
	}
	return unavailable(ctx, "fence", err)
}
