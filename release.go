package ashlock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// pendingRelease is a release left to the background retrier: one that
// could not reach the backend, or that of a dropped guard.
type pendingRelease struct {
	lease *lease
	claim backend.Claim
}

// release removes s's claim and unregisters s from its lease. s has
// ended and its claim was set by the Acquire that made it, so s.claim is
// read without the lock. The backend call runs on a context of its own,
// bounded by cleanupTimeout and by ctx's deadline, but not cancelled with
// ctx: a caller that unlocks from a deferred call after its context ended
// still releases the key.
//
// If the call fails, the claim is handed to the background retrier and the
// error (wrapping ErrUnavailable) returned.
func (c *LockClient) release(ctx context.Context, s *guardState) error {
	defer c.wd.leave(s.lease, s)
	claim := &s.claim
	if claim.Token == 0 {
		return nil
	}
	if c.local {
		// An in-process store answers at once whatever ctx is; no timeout
		// or cancellation shield needed.
		err := c.be.Release(ctx, *claim)
		if err != nil {
			// Only a closed store fails here; nothing to retry, but the
			// claim was not released.
			c.log.Warn("ashlock: release failed", "key", claim.Key, "token", claim.Token, "err", err)
		}
		return err
	}
	timeout := cleanupTimeout
	if dl, ok := ctx.Deadline(); ok && ctx.Err() == nil {
		timeout = min(timeout, time.Until(dl))
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	err := c.be.Release(rctx, *claim)
	cancel()
	if err == nil {
		return nil
	}
	c.log.Warn("ashlock: release failed; retrying in the background", "key", claim.Key, "token", claim.Token, "err", err)
	c.wd.queueRelease(pendingRelease{lease: s.lease, claim: *claim})
	return withCtx(ctx, fmt.Errorf("%w: release of %q: %w", ErrUnavailable, claim.Key, err))
}

// queueRelease keeps retrying a failed release until it succeeds, the lease
// is gone (so the claim is too), or the client closes (Close revokes the
// leases, which removes the claim), as every failed delete is retried (see
// backend.Retry). It runs one retrier goroutine at most.
func (wd *watchdog) queueRelease(p pendingRelease) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.mu.closed {
		return // Close has revoked the lease, which removes the claim
	}
	wd.mu.releases = append(wd.mu.releases, p)
	if !wd.mu.retrying {
		wd.mu.retrying = true
		wd.wg.Go(func() { backend.Retry(wd.stop, false, wd.retryReleases) })
	}
}

// retryReleases tries every pending release once and reports whether none
// is left; the retrier then ends.
func (wd *watchdog) retryReleases() bool {
	wd.mu.Lock()
	// A lease that left the pool (lost, revoked, closed) took its claims
	// with it.
	batch := slices.DeleteFunc(wd.mu.releases, func(p pendingRelease) bool { return p.lease.lost })
	wd.mu.releases = nil
	wd.mu.Unlock()

	var failed []pendingRelease
	for _, p := range batch {
		ctx, cancel := context.WithTimeout(wd.bg, cleanupTimeout)
		if wd.be.Release(ctx, p.claim) != nil {
			failed = append(failed, p)
		}
		cancel()
	}

	wd.mu.Lock()
	defer wd.mu.Unlock()
	wd.mu.releases = append(wd.mu.releases, failed...)
	wd.mu.retrying = len(wd.mu.releases) > 0
	return !wd.mu.retrying
}
