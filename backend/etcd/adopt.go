package etcd

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// Claims found under our name. A request finds its name taken only when a
// write under it was applied by etcd after its sender stopped waiting for
// it: an enqueue's own create, sent again after a lost reply (see create).
// Anything else under the name is a stray that fence.go keeps from being
// made by this Backend: a key made by hand, or left by a Backend closed
// before its cleanup succeeded. The name is lent to one acquisition at a
// time, so a claim under it bound to our lease is no one else's. One
// policy follows from what each kind of request can have sent:
//
//   - An enqueue, the only request sent again, takes over a claim that is
//     one claim of ours - at every key, bound to our lease, with one
//     create revision - and keeps its place in the queue (adopt). The
//     reply that told what was ahead of it was lost, so the check of the
//     permit count is made again. Anything else under the
//     name fails the Acquire, whose cleanup removes it.
//   - A request that does not queue sent nothing before, so what it finds
//     is a stray: taken for a claim that blocks it, it would keep a
//     TryAcquire out, and a waiting request would wait for it, bound to
//     our own live lease, until ctx ends. It is removed and the request
//     sent again (strays).

// adopt takes over the claim an enqueue found under our name (found: the
// reads of create), if it is one claim of ours, and then checks the
// permit count against the claims ahead of it at every key, in one more
// Txn.
func (a *acquisition) adopt(ctx context.Context, found *clientv3.TxnResponse) error {
	var token int64
	for i := range a.dirs {
		kvs := rangeKvs(found, i)
		if len(kvs) == 0 {
			return a.lostError() // deleted since the enqueue saw it
		}
		if kvs[0].Lease != int64(a.req.Lease) || (token != 0 && kvs[0].CreateRevision != token) {
			// Claim names embed their lease; only hand-made keys get here.
			return fmt.Errorf("%w: etcd acquire %q: the claims under %s are not one claim of ours",
				backend.ErrUnavailable, a.req.Key, a.e.key)
		}
		token = kvs[0].CreateRevision
	}
	a.b.reg.setToken(a.e, token)
	ops := make([]clientv3.Op, len(a.dirs))
	for i, dir := range a.dirs {
		ops[i] = aheadOf(a.kind, dir, token)
	}
	resp, err := a.b.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return rpcError(ctx, "acquire", err)
	}
	_, err = a.firstAhead(resp)
	return err
}

// strays returns the deletes, each compared on the create revision found,
// of what resp, the answer to whenFree's Txn (made: it succeeded) or,
// after it failed, to its reads, found under our name, at each key, nil if
// nothing: after a failure, what the reads of our name found; after a
// success, if a put
// found a claim under our name (a shared request's, whose compares do not
// cover its name) and so kept that claim's create revision there, what the
// Txn made at every key.
func (a *acquisition) strays(resp *clientv3.TxnResponse, made bool) []clientv3.Op {
	var del []clientv3.Op
	found := !made
	for i, key := range a.e.keys {
		kvs := rangeKvs(resp, len(a.dirs)+i)
		if made {
			kvs = []*mvccpb.KeyValue{{CreateRevision: resp.Header.Revision}}
			if prev := resp.Responses[i].GetResponsePut().GetPrevKv(); prev != nil {
				kvs, found = []*mvccpb.KeyValue{prev}, true
			}
		}
		if len(kvs) > 0 {
			del = append(del, guardedDelete(key, kvs[0].CreateRevision))
		}
	}
	if !found {
		return nil
	}
	return del
}
