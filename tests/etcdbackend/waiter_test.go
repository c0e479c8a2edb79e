package etcdbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// A waiter whose own claim is deleted while it waits never becomes the
// holder: not when its claim alone goes, and not when it goes in the same
// revision as the claim ahead of it (the case where waking on the
// predecessor's delete and taking the key without looking again would
// break mutual exclusion).
func TestWaiterWithDeletedClaimNeverHolds(t *testing.T) {
	tests := []struct {
		name        string
		alsoHolder  bool // delete the holder's claim in the same Txn
		releaseHold bool // release the holder afterwards
	}{
		{"OwnClaimDeleted", false, true},
		{"OwnAndPredecessorDeletedTogether", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			hb, _ := newBackend(t, shared, prefix)
			wb, _ := newBackend(t, shared, prefix)
			operator := shared.Client(t)
			holder := acquire(t, hb, request("k", grant(t, hb, 30*time.Second), "H"))

			wr := request("k", grant(t, wb, 30*time.Second), "W")
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			defer cancel()
			w := start(ctx, wb, wr)
			awaitCount(t, operator, prefix, 2)
			notYet(t, w, "W behind H")

			ops := []clientv3.Op{clientv3.OpDelete(claimKeyOtherThan(t, operator, prefix, hb.ClaimKey(holder)))}
			if tt.alsoHolder {
				ops = append(ops, clientv3.OpDelete(hb.ClaimKey(holder)))
			}
			if _, err := operator.Txn(testCtx(t, waitBound)).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
			res := await(t, w, "W after its claim was deleted")
			if !errors.Is(res.err, backend.ErrLeaseExpired) {
				t.Fatalf("W: Acquire = token %d, err %v; want ErrLeaseExpired", res.claim.Token, res.err)
			}
			if tt.releaseHold {
				if err := hb.Release(testCtx(t, waitBound), holder); err != nil {
					t.Fatal(err)
				}
			}
			info, err := hb.Inspect(testCtx(t, waitBound), "k")
			if err != nil {
				t.Fatal(err)
			}
			if info.Held || len(info.Waiters) != 0 {
				t.Fatalf("key after both claims went: %+v, want free", info)
			}
		})
	}
}
