package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// MinTTL is the shortest lease Grant gives: a shorter TTL is raised to it,
// as etcd raises small TTLs. A lease must outlast a few round trips and a
// scheduling delay, or its holder could lose it before it learnt it held.
const MinTTL = time.Second

// Grant creates a lease: the key {p}lease:<id>, expiring after ttl
// (rounded up to a whole millisecond, and at least MinTTL) by the server's
// clock. The TTL granted is that value. Errors wrap ErrInvalidConfig (ttl
// <= 0), ErrUnavailable or ErrClosed.
func (b *Backend) Grant(ctx context.Context, ttl time.Duration) (backend.Lease, error) {
	if err := b.closedErr("grant"); err != nil {
		return backend.Lease{}, err
	}
	if ttl <= 0 {
		return backend.Lease{}, fmt.Errorf("%w: redis grant: TTL %v", backend.ErrInvalidConfig, ttl)
	}
	ms := (max(ttl, MinTTL) + time.Millisecond - 1) / time.Millisecond
	id, err := grantScript.Run(ctx, b.c, []string{b.lay.token()}, b.lay.tag, int64(ms)).Text()
	if err != nil {
		return backend.Lease{}, b.fail(ctx, "grant", err)
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return backend.Lease{}, fmt.Errorf("%w: redis grant: lease id %q", backend.ErrUnavailable, id)
	}
	return backend.Lease{ID: backend.LeaseID(n), TTL: ms * time.Millisecond}, nil
}

// KeepAlive renews a lease for its TTL, counted from when the server runs
// the renewal (after the request was sent). A lease that has ended is
// never renewed: the error wraps ErrLeaseExpired, and this Backend's claims
// on it are reported lost (OnLost, from a goroutine of its own). So is a
// lease whose claims held here the store no longer has all of (writes
// lost in a failover that kept the lease): KeepAlive then revokes it. A
// renewal that finds more claims on the lease than this Backend has
// removes those it named but no longer tracks (see removeLeftBehind). The
// first renewal of a lease after the subscriber's connection broke reads
// the lease's index whole (see checkIndex) rather than count it.
func (b *Backend) KeepAlive(ctx context.Context, id backend.LeaseID) (time.Duration, error) {
	if err := b.closedErr("keep-alive"); err != nil {
		return 0, err
	}
	keys, releases := b.reg.heldOn(id)
	v, err := keepAliveScript.Run(ctx, b.c, []string{b.lay.token()}, b.lay.tag, int64(id)).Int64Slice()
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("reply %v", v)
	}
	if err != nil {
		return 0, b.fail(ctx, "keep-alive", err)
	}
	ms, indexed := v[0], v[1]
	if ms < 0 {
		b.goLeaseGone(id)
		return 0, fmt.Errorf("%w: redis keep-alive: lease %d has ended", backend.ErrLeaseExpired, id)
	}
	// Claims this Backend held before the renewal and released none of
	// since are all in the lease's index, unless the store lost them (a
	// failover that dropped the writes that made them, with the lease kept).
	if _, r := b.reg.heldOn(id); r == releases && indexed < int64(keys) {
		return 0, b.revokeLost(ctx, id, int(int64(keys)-indexed))
	}
	// After a break in the subscriber's stream the server may have lost
	// writes (a restart, a failover), and the counts may hide it: a
	// release it lost brings back a claim, which can stand in for a
	// claim it lost too. The index is then read whole, once.
	if due, gaps := b.reg.indexCheckDue(id); due {
		lost, err := b.checkIndex(ctx, id)
		if err != nil {
			return 0, err
		}
		if lost > 0 {
			return 0, b.revokeLost(ctx, id, lost)
		}
		b.reg.indexCheckedAt(id, gaps)
		return time.Duration(ms) * time.Millisecond, nil
	}
	// More entries than this Backend's claims on the lease can have: the
	// store has a claim of the lease that nobody here tracks, and which
	// would come to hold its key and never be released (see leftBehind).
	if indexed > int64(b.reg.trackedEntries(id)) {
		b.removeLeftBehind(ctx, id)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// revokeLost revokes lease id, whose claims held here the store has lost
// (n of them, or n entries), and reports them lost.
func (b *Backend) revokeLost(ctx context.Context, id backend.LeaseID, n int) error {
	if err := revokeScript.Run(ctx, b.c, []string{b.lay.token()}, b.lay.tag, int64(id)).Err(); err != nil {
		return b.fail(ctx, "keep-alive", err)
	}
	b.goLeaseGone(id)
	return fmt.Errorf("%w: redis keep-alive: the store lost %d of lease %d's claims' entries; lease revoked",
		backend.ErrLeaseExpired, n, id)
}

// checkIndex reads lease's index whole: it returns how many of the claims
// this Backend holds on it the store no longer has all entries of, and
// removes those it named and no longer tracks (see removeLeftBehind).
// Claims that began a Release meanwhile make it count none lost: the
// next gap, or the count, finds a loss then.
func (b *Backend) checkIndex(ctx context.Context, lease backend.LeaseID) (int, error) {
	held, releases := b.reg.heldIDs(lease)
	entries, err := b.c.SMembers(ctx, b.lay.leaseIndex(lease)).Result()
	if err != nil {
		return 0, b.fail(ctx, "keep-alive", err)
	}
	found := map[string]int{}
	for _, e := range entries {
		if id, _, ok := strings.Cut(e, "\n"); ok {
			found[id]++
		}
	}
	lost := 0
	if _, r := b.reg.heldOn(lease); r == releases {
		for id, n := range held {
			if found[id] < n {
				lost++
			}
		}
	}
	if lost == 0 {
		b.removeLeftBehindOf(ctx, lease, entries)
	}
	return lost, nil
}

// removeLeftBehind removes the claims on lease that this Backend named
// but no longer tracks. Such a claim is a late copy of an enqueue that
// reached the server after the claim had gone: its Acquire gave up on a
// reply that did not come and removed the claim by its name before the
// request it had sent arrived (a partition that healed, a retransmission),
// or go-redis retried the request on another connection and the first copy
// arrived after the claim had been released. A failover that lost a
// release leaves one too. Its lease lives on (this Backend renews it for
// its other claims), so nothing else would remove it. Claims named by the
// caller are left to their lease: the same lease may carry claims that
// another Backend tracks. Failures are logged; the next renewal tries
// again.
func (b *Backend) removeLeftBehind(ctx context.Context, lease backend.LeaseID) {
	entries, err := b.c.SMembers(ctx, b.lay.leaseIndex(lease)).Result()
	if err != nil {
		b.log.Debug("redis: reading a lease's claims failed", "lease", int64(lease), "error", err)
		return
	}
	b.removeLeftBehindOf(ctx, lease, entries)
}

// removeLeftBehindOf is removeLeftBehind given the lease's index entries,
// read before it is called.
func (b *Backend) removeLeftBehindOf(ctx context.Context, lease backend.LeaseID, entries []string) {
	// Read after the index: a claim is tracked before anything of it is
	// sent, so one listed in the index and not tracked now is done with.
	tracked := b.reg.trackedIDs(lease)
	left := map[string][]string{}
	for _, e := range entries {
		id, key, ok := strings.Cut(e, "\n")
		if _, mine := tracked[id]; ok && !mine && b.names.Made(id) {
			left[id] = append(left[id], key)
		}
	}
	for id, keys := range left {
		if err := b.release(ctx, id, "", false, false, keys); err != nil {
			b.log.Debug("redis: removing a claim left behind failed", "lease", int64(lease), "error", err)
			return
		}
		b.log.Warn("redis: removed a claim of the lease that this Backend no longer tracks (left behind by a late enqueue, or a release that a restart or failover undid)",
			"key", keys[0], "lease", int64(lease))
	}
}

// Revoke deletes a lease and every claim bound to it, in one script run,
// and then reports this Backend's claims on it lost (OnLost, from a
// goroutine of its own). Revoking a lease that has
// ended is not an error.
func (b *Backend) Revoke(ctx context.Context, id backend.LeaseID) error {
	if err := b.closedErr("revoke"); err != nil {
		return err
	}
	if err := revokeScript.Run(ctx, b.c, []string{b.lay.token()}, b.lay.tag, int64(id)).Err(); err != nil {
		return b.fail(ctx, "revoke", err)
	}
	b.goLeaseGone(id)
	return nil
}

// goLeaseGone runs leaseGone on a goroutine of the Backend's: OnLost is
// never called on a caller's goroutine, which may hold locks of its own
// (the client's watchdog renews and revokes).
func (b *Backend) goLeaseGone(id backend.LeaseID) {
	b.spawn(func() { b.leaseGone(id) })
}

// leaseGone handles the end of lease id, however it was learnt: waiters
// that wait on its claims wake, this Backend's claims on it are lost, and
// if anything here had an interest in it its claims are reaped at once
// (in the background) rather than at the next read of their keys.
func (b *Backend) leaseGone(id backend.LeaseID) {
	interested := b.reg.leaseEnded(id)
	b.reg.lose(id, fmt.Errorf("%w: redis: lease %d ended (expired, revoked or deleted)", backend.ErrLeaseExpired, id))
	if !interested {
		return
	}
	b.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := reapScript.Run(ctx, b.c, []string{b.lay.token()}, b.lay.tag, strconv.FormatInt(int64(id), 10)).Err(); err != nil {
			b.log.Debug("redis: reaping an ended lease failed; its claims go at the next read of their keys", "lease", int64(id), "error", err)
		}
	})
}
