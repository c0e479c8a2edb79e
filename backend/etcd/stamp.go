package etcd

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// stamp calls req.Stamp with the highest stamp recorded at the claim's
// keys and records the result, in each key's stamp record and in the
// claim's record at every key, with one Txn that commits only while the
// claim still exists at every key: a claim that lost a key never records
// a stamp. A single-key claim read its stamp record in the Txn that made
// it the holder (withStamp); a multi-key claim reads them all here, in a
// Txn of their own, since with the enqueue's reads and puts they would not
// fit in one request.
//
// The stamp records only ever rise. An exclusive holder is the only one
// that writes its keys' records, but the holders of a shared or counted
// key stamp concurrently, so the Txn also compares each record's mod
// revision with the one read; if another holder recorded its stamp
// meanwhile, the records are read again and the higher stamp stays, so a
// later holder sees the highest stamp of all the holders before it. The
// Txn carries those reads in its Else branch unless it would then exceed
// maxTxnBytes.
func (a *acquisition) stamp(ctx context.Context) (backend.Timestamp, error) {
	n := len(a.dirs)
	stampKeys := make([]string, n)
	reads := make([]clientv3.Op, 2*n) // every stamp record, then the claim at every key
	for i, k := range a.req.AllKeys() {
		stampKeys[i] = a.b.layout.stamp(k)
		reads[i] = clientv3.OpGet(stampKeys[i])
		reads[n+i] = clientv3.OpGet(a.e.keys[i], clientv3.WithKeysOnly())
	}
	recs := make([][]*mvccpb.KeyValue, n) // what was read of each stamp record
	if a.stampKey != "" {
		recs[0] = a.prevStamp
	} else {
		resp, err := a.b.cli.Txn(ctx).Then(reads[:n]...).Commit()
		if err != nil {
			return backend.Timestamp{}, rpcError(ctx, "acquire (stamp)", err)
		}
		for i := range recs {
			recs[i] = rangeKvs(resp, i)
		}
	}
	var st backend.Timestamp
	rec := "" // the claim's record with st, once st is known
	for {
		// cur and revs: the stamp each record holds and its mod revision (0: no record).
		cur, revs := make([]backend.Timestamp, n), make([]int64, n)
		var prev backend.Timestamp
		for i, kvs := range recs {
			if len(kvs) > 0 {
				r, err := decodeClaim(kvs[0].Value, exclusive)
				if err != nil {
					return backend.Timestamp{}, fmt.Errorf("etcd acquire %q: stamp record %s: %w", a.req.Key, stampKeys[i], err)
				}
				if cur[i], revs[i] = r.Stamp, kvs[0].ModRevision; prev.Less(r.Stamp) {
					prev = r.Stamp
				}
			}
		}
		if rec == "" {
			var err error
			if st, err = a.req.Stamp(prev); err != nil {
				return backend.Timestamp{}, err
			}
			rec = a.record(a.acquiredAt, st)
		}
		cmps := make([]clientv3.Cmp, 0, 2*n)
		writes := make([]clientv3.Op, 0, 2*n)
		for i, key := range a.e.keys {
			cmps = append(cmps, incarnation(key, a.e.token))
			writes = append(writes, rewrite(key, rec))
			if revs[i] == 0 || cur[i].Less(st) {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(stampKeys[i]), "=", revs[i]))
				writes = append(writes, clientv3.OpPut(stampKeys[i], encodeClaim(claimRecord{Stamp: st})))
			}
		}
		els := fitting(cmps, writes, reads)
		resp, err := a.b.cli.Txn(ctx).If(cmps...).Then(writes...).Else(els...).Commit()
		if err != nil {
			return backend.Timestamp{}, rpcError(ctx, "acquire (stamp)", err)
		}
		if resp.Succeeded {
			return st, nil
		}
		if els == nil {
			if resp, err = a.b.cli.Txn(ctx).Then(reads...).Commit(); err != nil {
				return backend.Timestamp{}, rpcError(ctx, "acquire (stamp)", err)
			}
		}
		for i := range a.dirs {
			if own := rangeKvs(resp, n+i); len(own) == 0 || own[0].CreateRevision != a.e.token {
				return backend.Timestamp{}, a.lostError()
			}
			recs[i] = rangeKvs(resp, i)
		}
	}
}
