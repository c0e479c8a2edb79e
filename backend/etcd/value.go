package etcd

import (
	"context"
	"errors"

	"github.com/ash-lock/ashlock/backend"
)

// SetValue replaces the value published with c.
func (b *Backend) SetValue(ctx context.Context, c backend.Claim, v []byte) error {
	return errors.New("etcd: SetValue: not implemented yet")
}
