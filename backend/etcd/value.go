package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// SetValue replaces the value published with c, at every key of a
// multi-key claim, in one Txn that compares the claim's identity (create
// revision equals c.Token) at every key and rewrites its record there,
// keeping the rest of the record. If the claim is gone at any key it
// changes nothing and returns an error wrapping backend.ErrLeaseExpired.
//
// The record is rebuilt from c and the owner label the Backend kept for
// the claim; for a claim this Backend did not hand out (or no longer
// holds) it is read first, which costs one more round trip. Safe for
// concurrent use.
func (b *Backend) SetValue(ctx context.Context, c backend.Claim, v []byte) error {
	if err := b.closed("set value"); err != nil {
		return err
	}
	if err := backend.CheckValue(v, len(c.AllKeys())); err != nil {
		return fmt.Errorf("etcd set value %q: %w", c.Key, err)
	}
	if c.Token == 0 {
		return fmt.Errorf("%w: etcd set value %q: no claim", backend.ErrLeaseExpired, c.Key)
	}
	keys := b.claimKeys(c)
	token := int64(c.Token)
	var rec claimRecord
	if e := b.reg.held(keys[0], token); e != nil {
		rec = claimRecord{Owner: e.owner, AcquiredAt: c.AcquiredAt, Stamp: c.Stamp, Permit: c.Permit}
	} else {
		resp, err := b.cli.Get(ctx, keys[0])
		if err != nil {
			return rpcError(ctx, "set value", err)
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != token {
			return b.goneError(c)
		}
		if rec, err = decodeClaim(resp.Kvs[0].Value, kindOfName(keys[0])); err != nil {
			return fmt.Errorf("%w: etcd set value %q: claim %s: %w", backend.ErrUnavailable, c.Key, keys[0], err)
		}
	}
	rec.Value = v
	val := encodeClaim(rec)
	cmps := make([]clientv3.Cmp, len(keys))
	puts := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		cmps[i] = incarnation(k, token)
		puts[i] = rewrite(k, val)
	}
	resp, err := b.cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
	if err != nil {
		return rpcError(ctx, "set value", err)
	}
	if !resp.Succeeded {
		return b.goneError(c)
	}
	return nil
}

func (b *Backend) goneError(c backend.Claim) error {
	return fmt.Errorf("%w: etcd set value %q: claim %s (token %d) no longer exists",
		backend.ErrLeaseExpired, c.Key, c.ID, c.Token)
}
