package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Grant creates an etcd lease. etcd leases are whole seconds, so ttl is
// rounded up (1.2s asks for 2s), never down; etcd may raise it further to
// its minimum lease TTL. The returned Lease carries the TTL etcd actually
// granted, which is never less than ttl.
//
// Grant blocks for one round trip. It fails with an error wrapping
// backend.ErrUnavailable when etcd cannot be reached or refuses, joined with
// ctx.Err() if ctx ended first; a ttl <= 0 is a programmer error reported
// as an error. Safe for concurrent use.
func (b *Backend) Grant(ctx context.Context, ttl time.Duration) (backend.Lease, error) {
	if b.closed.Load() {
		return backend.Lease{}, closedError("lease grant")
	}
	if ttl <= 0 {
		return backend.Lease{}, fmt.Errorf("etcd lease grant: TTL %v is not positive", ttl)
	}
	secs := int64(ttl / time.Second)
	if ttl%time.Second != 0 {
		secs++ // round up: a shorter lease than asked for would break the watchdog's deadline
	}
	resp, err := b.cli.Grant(ctx, secs)
	if err != nil {
		return backend.Lease{}, rpcError(ctx, "lease grant", err)
	}
	if resp.Error != "" {
		return backend.Lease{}, fmt.Errorf("%w: etcd lease grant: %s", backend.ErrUnavailable, resp.Error)
	}
	if resp.ID == clientv3.NoLease || resp.TTL < secs {
		return backend.Lease{}, fmt.Errorf("%w: etcd lease grant: got lease %x with TTL %ds for a %ds request",
			backend.ErrUnavailable, int64(resp.ID), resp.TTL, secs)
	}
	return backend.Lease{ID: backend.LeaseID(resp.ID), TTL: time.Duration(resp.TTL) * time.Second}, nil
}

// KeepAlive renews lease id once and returns the TTL etcd renewed it for,
// counted from when the request was sent. It blocks for one round trip on
// the Backend's shared keep-alive stream (opening it first if needed).
//
// A lease etcd no longer has (expired or revoked) yields an error wrapping
// backend.ErrLeaseExpired. Other failures wrap backend.ErrUnavailable,
// joined with ctx.Err() if ctx ended first. Safe for concurrent use.
func (b *Backend) KeepAlive(ctx context.Context, id backend.LeaseID) (time.Duration, error) {
	if b.closed.Load() {
		return 0, closedError("lease keep-alive")
	}
	ttl, err := b.keeper.renew(ctx, int64(id))
	if err != nil {
		return 0, err
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("%w: etcd lease %x not found", backend.ErrLeaseExpired, int64(id))
	}
	return time.Duration(ttl) * time.Second, nil
}

// Revoke ends lease id at once; etcd deletes every claim bound to it, and
// their holders' OnLost fire. Revoking a lease etcd does not know (expired,
// already revoked) returns nil. Other failures wrap backend.ErrUnavailable,
// joined with ctx.Err() if ctx ended first. Safe for concurrent use.
func (b *Backend) Revoke(ctx context.Context, id backend.LeaseID) error {
	if b.closed.Load() {
		return closedError("lease revoke")
	}
	_, err := b.cli.Revoke(ctx, clientv3.LeaseID(id))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return rpcError(ctx, "lease revoke", err)
}
