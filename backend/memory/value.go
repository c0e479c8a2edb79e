package memory

import (
	"bytes"
	"context"
	"fmt"

	"github.com/ash-lock/ashlock/backend"
)

// SetValue replaces the value published with c, which Inspect shows at
// each of its keys, with a copy of v. The claim is found as Release finds
// it (by c.Key, c.ID and c.Token), so the write compares on its identity:
// if the store no longer has the claim holding its keys, SetValue changes
// nothing and returns an error wrapping backend.ErrLeaseExpired. A v over
// backend.MaxValueLen bytes, or over backend.MaxValueTotal bytes for all
// of c's keys together, is backend.ErrInvalidConfig. SetValue does not
// block; it fails with ctx's error if ctx has already ended, and with
// backend.ErrClosed after Close.
//
// The old value is replaced, not written into: Claim.Value slices handed
// out earlier keep the value they had.
func (b *Backend) SetValue(ctx context.Context, c backend.Claim, v []byte) error {
	if err := backend.CheckValue(v, len(c.AllKeys())); err != nil {
		return fmt.Errorf("memory: set value on %q: %w: %w", c.Key, backend.ErrInvalidConfig, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("memory: set value on %q: %w", c.Key, backend.ContextError(ctx))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed("set value")
	}
	x := b.findLocked(&c)
	if x == nil || x.state != stateHolding {
		return fmt.Errorf("memory: set value on %q: claim with token %d is gone: %w",
			c.Key, c.Token, backend.ErrLeaseExpired)
	}
	x.extra().value = bytes.Clone(v)
	if b.obs != nil {
		b.obs.markLocked(x)
	}
	b.flushLocked()
	return nil
}
