package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/ash-lock/ashlock/backend"
)

// Grant creates an etcd lease. etcd leases are whole seconds, so ttl is
// rounded up (1.2s asks for 2s), never down; etcd may raise it further to
// its minimum lease TTL. The returned Lease carries the TTL etcd actually
// granted, which is never less than ttl. The caller validates ttl (> 0).
//
// Grant blocks for one round trip. It fails with an error wrapping
// backend.ErrUnavailable when etcd cannot be reached or refuses, joined with
// ctx.Err() if ctx ended first. Safe for concurrent use.
func (b *Backend) Grant(ctx context.Context, ttl time.Duration) (backend.Lease, error) {
	if err := b.closed("lease grant"); err != nil {
		return backend.Lease{}, err
	}
	secs := int64((ttl + time.Second - 1) / time.Second) // rounded up: a shorter lease would break the watchdog's deadline
	resp, err := b.cli.Grant(ctx, secs)
	if err != nil {
		return backend.Lease{}, rpcError(ctx, "lease grant", err)
	}
	if resp.ID == clientv3.NoLease || resp.TTL < secs {
		return backend.Lease{}, fmt.Errorf("%w: etcd lease grant: got lease %x with TTL %ds for a %ds request",
			backend.ErrUnavailable, int64(resp.ID), resp.TTL, secs)
	}
	return backend.Lease{ID: backend.LeaseID(resp.ID), TTL: time.Duration(resp.TTL) * time.Second}, nil
}

// KeepAlive renews lease id once and returns the TTL etcd renewed it for,
// counted from when the request was sent. It makes one attempt on a
// keep-alive stream of its own, opened for this call (clientv3's
// Lease.KeepAlive renews on a timer of its own, and its KeepAliveOnce
// retries at once, without end, while a member has no leader): when to
// renew and when to retry is the caller's decision. It blocks for one round
// trip, or until ctx ends while etcd is out of reach; a member cut off from
// its cluster's leader refuses at once.
//
// A lease etcd no longer has (expired or revoked) yields an error wrapping
// backend.ErrLeaseExpired. Other failures wrap backend.ErrUnavailable,
// joined with ctx.Err() if ctx ended first. Safe for concurrent use.
func (b *Backend) KeepAlive(ctx context.Context, id backend.LeaseID) (time.Duration, error) {
	if err := b.closed("lease keep-alive"); err != nil {
		return 0, err
	}
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel() // ends the stream
	s, err := pb.NewLeaseClient(b.cli.ActiveConnection()).LeaseKeepAlive(sctx, grpc.WaitForReady(true))
	if err == nil {
		err = s.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)})
	}
	var resp *pb.LeaseKeepAliveResponse
	if err == nil {
		resp, err = s.Recv()
	}
	if err != nil {
		return 0, rpcError(ctx, "lease keep-alive", err)
	}
	if resp.TTL <= 0 {
		b.reg.forgetLease(id)
		return 0, fmt.Errorf("%w: etcd lease %x not found", backend.ErrLeaseExpired, int64(id))
	}
	return time.Duration(resp.TTL) * time.Second, nil
}

// Revoke ends lease id at once; etcd deletes every claim bound to it, and
// their holders' OnLost fire. Revoking a lease etcd does not know (expired,
// already revoked) returns nil. Other failures wrap backend.ErrUnavailable,
// joined with ctx.Err() if ctx ended first; the lease then expires at its
// TTL. Whatever the outcome, no claim may be made under the lease again.
// Safe for concurrent use.
func (b *Backend) Revoke(ctx context.Context, id backend.LeaseID) error {
	if err := b.closed("lease revoke"); err != nil {
		return err
	}
	_, err := b.cli.Revoke(ctx, clientv3.LeaseID(id))
	// A lease its owner revokes is done with, whether the revoke got
	// through or the lease is left to expire: no claim is made under it
	// again, so the names of its ended claims can go now (or they would
	// stay for the Backend's life when etcd cannot be reached).
	b.reg.forgetLease(id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return rpcError(ctx, "lease revoke", err)
	}
	return nil
}
