package bench_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// rawRW is ashlock's shared-claim protocol on etcd sent by hand, with none
// of the library around it (see rawCandidate for the exclusive one): the
// writer's claim is named after its lease in hex, a reader's after its
// lease with an "s" in front, so that the writers of the queue directory
// are the key range [dir+"0", dir+"g"). A reader creates its claim and
// reads the newest writer in one Txn; if there is one it watches that
// writer's delete and then runs one Txn that checks that its own claim
// still exists and no writer is left (the Jepsen fix) and, with record
// set, rewrites its record with its acquired-at time, as the library must
// for Inspect to report when each reader took the key. Releases delete.
//
// With record set it is the floor of the library's reader admission under
// the contract; without it the admission is a read, as the recipe
// RWMutex's Get is.
func rawRW(record bool) rwSetup {
	return func(b *testing.B, wctr, rctr *rpcCounter, prefix string, n int) (benchrun.Take, []benchrun.Take, func(context.Context) (int, error)) {
		dir := prefix + "claims/k/"
		writers := dir + "0"
		writersEnd := dir + "g"
		claim := func(ctr *rpcCounter, shared bool) (*clientv3.Client, clientv3.LeaseID, string) {
			cli := newEtcd(b, ctr)
			lease := newSession(b, cli, 0).Lease()
			name := fmt.Sprintf("%x", int64(lease))
			if shared {
				name = "s" + name
			}
			return cli, lease, dir + name
		}
		rec := func(v string) string { return fmt.Sprintf("owner|%d|%s", time.Now().UnixNano(), v) }

		wcli, wlease, wkey := claim(wctr, false)
		writer := func(ctx context.Context) (func(context.Context) error, error) {
			resp, err := wcli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(dir), "=", 0).WithPrefix()).
				Then(clientv3.OpPut(wkey, rec("w"), clientv3.WithLease(wlease))).Commit()
			switch {
			case err != nil:
				return nil, err
			case !resp.Succeeded:
				return nil, errors.New("raw writer: the key is not free")
			}
			return func(ctx context.Context) error { _, err := wcli.Delete(ctx, wkey); return err }, nil
		}

		newestWriter := func(token int64) clientv3.Op {
			opts := []clientv3.OpOption{
				clientv3.WithRange(writersEnd),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
				clientv3.WithLimit(1), clientv3.WithKeysOnly(),
			}
			if token > 0 {
				opts = append(opts, clientv3.WithMaxCreateRev(token-1))
			}
			return clientv3.OpGet(writers, opts...)
		}
		noWriter := clientv3.Compare(clientv3.CreateRevision(writers), "=", 0).WithRange(writersEnd)
		readers := make([]benchrun.Take, n)
		for i := range readers {
			cli, lease, key := claim(rctr, true)
			readers[i] = func(ctx context.Context) (func(context.Context) error, error) {
				resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
					Then(newestWriter(0), clientv3.OpPut(key, rec("r"), clientv3.WithLease(lease))).Commit()
				if err != nil {
					return nil, err
				}
				if !resp.Succeeded {
					return nil, errors.New("raw reader: a claim exists under our name")
				}
				token := resp.Header.Revision
				release := func(ctx context.Context) error { _, err := cli.Delete(ctx, key); return err }
				ahead := resp.Responses[0].GetResponseRange().GetKvs()
				if len(ahead) == 0 {
					return release, nil
				}
				pred, rev := string(ahead[0].Key), resp.Header.Revision
				own := clientv3.Compare(clientv3.CreateRevision(key), "=", token)
				rc := &rawCandidate{cli: cli}
				for {
					if err := rc.waitDeleted(ctx, pred, rev+1); err != nil {
						return nil, err
					}
					var then []clientv3.Op
					if record {
						then = append(then, clientv3.OpPut(key, rec("r"), clientv3.WithIgnoreLease()))
					}
					resp, err := cli.Txn(ctx).If(own, noWriter).Then(then...).
						Else(clientv3.OpGet(key, clientv3.WithKeysOnly()), newestWriter(token)).Commit()
					if err != nil {
						return nil, err
					}
					if resp.Succeeded {
						return release, nil
					}
					if len(resp.Responses[0].GetResponseRange().GetKvs()) == 0 {
						return nil, errors.New("raw reader: our claim is gone")
					}
					kvs := resp.Responses[1].GetResponseRange().GetKvs()
					if len(kvs) == 0 {
						// Only writers newer than ours are left: a complete
						// floor would compare for that too; this benchmark
						// never queues a writer behind its readers.
						return nil, errors.New("raw reader: a writer queued behind the readers")
					}
					pred, rev = string(kvs[0].Key), resp.Header.Revision
				}
			}
		}

		obs := newEtcd(b, nil)
		queued := func(ctx context.Context) (int, error) {
			resp, err := obs.Get(ctx, dir+"s", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return 0, err
			}
			return int(resp.Count), nil
		}
		return writer, readers, queued
	}
}
