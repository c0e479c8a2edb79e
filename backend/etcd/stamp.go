package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// stamp calls req.Stamp with the previous holder's stamp and records the
// result, in the stamp record and in the claim, with one Txn that commits
// only while the claim still exists: a claim that lost the key never
// records a stamp.
func (a *acquisition) stamp(ctx context.Context) (backend.Timestamp, error) {
	var prev backend.Timestamp
	if a.prevStamp != nil {
		p, err := decodeStamp(a.prevStamp)
		if err != nil {
			return backend.Timestamp{}, fmt.Errorf("etcd acquire %q: stamp record %s: %w", a.req.Key, a.stampKey, err)
		}
		prev = p
	}
	st, err := a.req.Stamp(prev)
	if err != nil {
		return backend.Timestamp{}, err
	}
	resp, err := a.b.cli.Txn(ctx).If(incarnation(a.e.key, a.token)).
		Then(
			clientv3.OpPut(a.stampKey, encodeStamp(st)),
			clientv3.OpPut(a.e.key, a.record(a.acquiredAt, st), clientv3.WithIgnoreLease()),
		).Commit()
	if err != nil {
		return backend.Timestamp{}, rpcError(ctx, "acquire (stamp)", err)
	}
	if !resp.Succeeded {
		return backend.Timestamp{}, a.lostError()
	}
	return st, nil
}
