package etcd

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// stamp calls req.Stamp with the previous holder's stamp and records the
// result, in the stamp record and in the claim, with one Txn that commits
// only while the claim still exists: a claim that lost the key never
// records a stamp.
//
// The stamp record only ever rises. An exclusive holder is the only one
// that writes it, but the holders of a shared or counted key stamp
// concurrently, so the Txn also compares the record's mod revision with
// the one read; if another holder recorded its stamp meanwhile, the higher
// of the two stays, and a later holder sees the highest stamp of all the
// holders before it.
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
	rev, raise := a.stampRev, a.prevStamp == nil || prev.Less(st)
	for {
		cmps := []clientv3.Cmp{incarnation(a.e.key, a.token)}
		ops := []clientv3.Op{rewrite(a.e.key, a.record(a.acquiredAt, st))}
		if raise {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(a.stampKey), "=", rev))
			ops = append(ops, clientv3.OpPut(a.stampKey, encodeStamp(st)))
		}
		resp, err := a.b.cli.Txn(ctx).If(cmps...).Then(ops...).
			Else(clientv3.OpGet(a.e.key, clientv3.WithKeysOnly()), clientv3.OpGet(a.stampKey)).Commit()
		if err != nil {
			return backend.Timestamp{}, rpcError(ctx, "acquire (stamp)", err)
		}
		if resp.Succeeded {
			return st, nil
		}
		if own := rangeKvs(resp, 0); len(own) == 0 || own[0].CreateRevision != a.token {
			return backend.Timestamp{}, a.lostError()
		}
		if rev, raise, err = higher(rangeKvs(resp, 1), st); err != nil {
			return backend.Timestamp{}, fmt.Errorf("etcd acquire %q: stamp record %s: %w", a.req.Key, a.stampKey, err)
		}
	}
}

// higher reads a stamp record (kvs: the read of it) and reports its mod
// revision (0 if there is none) and whether st is above the stamp it
// holds, so that st should replace it.
func higher(kvs []*mvccpb.KeyValue, st backend.Timestamp) (int64, bool, error) {
	if len(kvs) == 0 {
		return 0, true, nil
	}
	cur, err := decodeStamp(kvs[0].Value)
	if err != nil {
		return 0, false, err
	}
	return kvs[0].ModRevision, cur.Less(st), nil
}
