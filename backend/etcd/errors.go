package etcd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/ash-lock/ashlock/backend"
)

// rpcError turns an error from an etcd call made with ctx into the
// backend's vocabulary:
//
//   - a lease etcd does not know wraps backend.ErrLeaseExpired;
//   - ctx cancelled by the caller wraps ctx.Err() (the caller gave up; that
//     says nothing about etcd);
//   - everything else - unreachable endpoints, no leader, timeouts, a ctx
//     deadline that passed while etcd did not answer, authentication and
//     permission failures - wraps backend.ErrUnavailable and keeps etcd's
//     message, so that "permission denied" or "authentication failed" is
//     visible to whoever reads the error. When ctx has ended the result is
//     also joined with ctx.Err().
func rpcError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("%w: etcd %s: %w", backend.ErrLeaseExpired, op, err)
	}
	switch cerr := ctx.Err(); {
	case cerr == nil:
		return fmt.Errorf("%w: etcd %s: %w", backend.ErrUnavailable, op, err)
	case errors.Is(cerr, context.Canceled):
		return fmt.Errorf("etcd %s: %w", op, backend.ContextError(ctx))
	default:
		return errors.Join(fmt.Errorf("%w: etcd %s: %w", backend.ErrUnavailable, op, err), cerr)
	}
}

// closedError is returned by every call on a closed Backend.
func closedError(op string) error {
	return fmt.Errorf("etcd %s: %w", op, backend.ErrClosed)
}
