package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ash-lock/ashlock/backend"
)

// Release removes c from every one of its keys where Redis still has it
// under the same ID and token, in one script run, and reports the
// departure to the claims waiting behind it. It never removes another
// claim, so a retried or late Release is harmless; a claim already gone
// (its lease ended) gives nil. Once it returns nil, c's OnLost is not
// called. Errors wrap ErrUnavailable or ErrClosed, or are ctx's.
func (b *Backend) Release(ctx context.Context, c backend.Claim) error {
	if err := b.closedErr("release"); err != nil {
		return err
	}
	ref := claimRef{key: c.Key, token: c.Token}
	// Before the script runs: from now on the store may no longer have the
	// claim, which KeepAlive must not take for a loss.
	b.reg.releasing(ref)
	// A claim this Backend named is removed again by its lease's next
	// renewal should a restart bring it back (see removeLeftBehind), so
	// its release need not wait for the disk when nothing queues behind
	// it (see releaseScript). A claim the caller named is left to its
	// lease, so its release is written before it is answered.
	lazy := b.names.Made(c.ID)
	if err := b.release(ctx, c.ID, strconv.FormatUint(c.Token, 10), lazy, backend.HoldsAlone(c.Kind()), c.AllKeys()); err != nil {
		return err
	}
	b.reg.untrackRef(ref)
	return nil
}

// release runs releaseScript: token "" removes the claim named id whatever
// its token, lazy lets a release that empties the claim's queues skip
// the append-only file until the next write, and alone says the claim
// held its keys alone.
func (b *Backend) release(ctx context.Context, id, token string, lazy, alone bool, keys []string) error {
	args := make([]any, 0, 6+len(keys))
	args = append(args, b.lay.tag, id, token, flag(lazy), flag(alone), len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	if err := releaseScript.Run(ctx, b.c, []string{b.lay.token()}, args...).Err(); err != nil {
		return b.fail(ctx, "release", err)
	}
	return nil
}

// SetValue replaces the value published with c at every one of its keys,
// in one script run that first checks that c is still there under the
// same ID and token. If it is not, nothing changes and the error wraps
// ErrLeaseExpired.
func (b *Backend) SetValue(ctx context.Context, c backend.Claim, v []byte) error {
	if err := b.closedErr("set value"); err != nil {
		return err
	}
	keys := c.AllKeys()
	if err := backend.CheckValue(v, len(keys)); err != nil {
		return fmt.Errorf("%w: redis set value %q: %w", backend.ErrInvalidConfig, c.Key, err)
	}
	args := make([]any, 0, 5+len(keys))
	args = append(args, b.lay.tag, c.ID, strconv.FormatUint(c.Token, 10), v, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	ok, err := setValueScript.Run(ctx, b.c, []string{b.lay.token()}, args...).Int64()
	if err != nil {
		return b.fail(ctx, "set value", err)
	}
	if ok != 1 {
		return fmt.Errorf("%w: redis set value %q: the claim with token %d is gone", backend.ErrLeaseExpired, c.Key, c.Token)
	}
	return nil
}
