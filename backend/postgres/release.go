package postgres

import (
	"bytes"
	"context"
	"fmt"

	"github.com/ash-lock/ashlock/backend"
)

// Release deletes the claim's rows if, and only if, they still have c's
// token and name, in one statement; it never deletes another claim, so a
// late or repeated Release is harmless, and a claim already gone gives
// nil. Once Release has been called, the claim's delete is not reported
// to OnLost. It waits for a transaction that fenced a write with the
// claim (see Fence) to end. One round trip.
func (b *Backend) Release(ctx context.Context, c backend.Claim) error {
	if err := b.closed("release"); err != nil {
		return err
	}
	if h := b.hub.find(ref{key: c.Key, token: int64(c.Token)}); h != nil && h.name == c.ID {
		b.hub.leave(h)
		defer b.hub.forget(h)
	}
	if _, err := b.pool.Exec(ctx, b.sql.release, c.AllKeys(), int64(c.Token), c.ID); err != nil {
		return unavailable(ctx, "release", err)
	}
	b.names.done(c.Lease, c.ID)
	return nil
}

// SetValue replaces the value published with c, at every key, in one
// statement that compares on the claim's identity and its lease's life.
// If the claim is gone, or its lease has expired by the server's clock, it
// changes nothing and returns an error wrapping backend.ErrLeaseExpired.
func (b *Backend) SetValue(ctx context.Context, c backend.Claim, v []byte) error {
	if err := b.closed("set value"); err != nil {
		return err
	}
	keys := c.AllKeys()
	if err := backend.CheckValue(v, len(keys)); err != nil {
		return fmt.Errorf("%w: postgres set value: %w", backend.ErrInvalidConfig, err)
	}
	if v == nil {
		v = []byte{}
	}
	tag, err := b.pool.Exec(ctx, b.sql.setValue, keys, int64(c.Token), c.ID, bytes.Clone(v))
	if err != nil {
		return unavailable(ctx, "set value", err)
	}
	if tag.RowsAffected() != int64(len(keys)) {
		return fmt.Errorf("%w: postgres set value %q: the claim is gone or its lease expired", backend.ErrLeaseExpired, c.Key)
	}
	return nil
}
