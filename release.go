package ashlock

import (
	"context"
	"fmt"
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
	c.queueRelease(pendingRelease{lease: s.lease, claim: *claim})
	return withCtx(ctx, fmt.Errorf("%w: release of %q: %w", ErrUnavailable, claim.Key, err))
}

// queueRelease keeps retrying a failed release until it succeeds, the lease
// is gone (so the claim is too), or the client closes (Close revokes the
// leases, which removes the claim). It runs one retrier goroutine at most.
func (c *LockClient) queueRelease(p pendingRelease) {
	c.releasesMu.Lock()
	defer c.releasesMu.Unlock()
	if c.releasesStopped {
		return // Close has revoked the lease, which removes the claim
	}
	c.releases = append(c.releases, p)
	if !c.releasesRun {
		c.releasesRun = true
		c.wd.wg.Add(1)
		go c.retryReleases()
	}
}

func (c *LockClient) retryReleases() {
	defer c.wd.wg.Done()
	backoff := 100 * time.Millisecond
	timer := time.NewTimer(backoff)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-c.wd.stop:
			return
		}
		c.releasesMu.Lock()
		batch := c.releases
		c.releases = nil
		c.releasesMu.Unlock()

		var failed []pendingRelease
		for _, p := range batch {
			if c.leaseGone(p.lease) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			err := c.be.Release(ctx, p.claim)
			cancel()
			if err != nil {
				failed = append(failed, p)
			}
		}

		c.releasesMu.Lock()
		c.releases = append(c.releases, failed...)
		if len(c.releases) == 0 {
			c.releasesRun = false
			c.releasesMu.Unlock()
			return
		}
		c.releasesMu.Unlock()
		backoff = min(2*backoff, 5*time.Second)
		timer.Reset(backoff)
	}
}

// leaseGone reports whether l has left the pool (lost, revoked or closed):
// its claims are gone or going with it.
func (c *LockClient) leaseGone(l *lease) bool {
	c.wd.mu.Lock()
	defer c.wd.mu.Unlock()
	return l.lost
}

// stopReleases drops whatever is still pending and refuses new entries;
// Close has revoked the leases those claims were bound to. It must run
// before Close waits for the client's goroutines, so that no retrier can
// start after the wait.
func (c *LockClient) stopReleases() {
	c.releasesMu.Lock()
	c.releasesStopped = true
	c.releases = nil
	c.releasesMu.Unlock()
}
