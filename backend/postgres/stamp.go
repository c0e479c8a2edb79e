package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ash-lock/ashlock/backend"
)

// stamp stamps an acquisition that holds its keys: it reads the highest
// stamp recorded at any of them, calls req.Stamp with it, and records the
// result with the claim and at each key whose stamp it exceeds, in one
// statement that compares on the claim's identity.
func (a *acquisition) stamp(ctx context.Context) (backend.Timestamp, error) {
	var prev backend.Timestamp
	var wall, logical int64
	err := a.retry(ctx, "read stamp", func() error {
		err := a.b.pool.QueryRow(ctx, a.b.sql.readStamp, a.keys).Scan(&wall, &logical)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return prev, err
	}
	prev = backend.Timestamp{WallTime: wall, Logical: uint32(logical)}
	st, err := a.req.Stamp(prev)
	if err != nil {
		return st, fmt.Errorf("postgres acquire %q: stamp: %w", a.req.Key, err)
	}
	var n int
	err = a.retry(ctx, "write stamp", func() error {
		return a.b.pool.QueryRow(ctx, a.b.sql.writeStamp, a.keys, a.token, a.req.ID, st.WallTime, int64(st.Logical)).Scan(&n)
	})
	if err != nil {
		return st, err
	}
	if n != len(a.keys) {
		return st, a.lostError()
	}
	return st, nil
}
