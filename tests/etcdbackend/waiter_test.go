package etcdbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// A waiter does not poll: while it waits behind a holder it sends no
// request at all, however long the wait, and wakes once, when the holder's
// claim is deleted. The window in which nothing may be sent is the point of
// the test, not a stand-in for synchronisation.
func TestWaiterDoesNotPoll(t *testing.T) {
	prefix := uniquePrefix(t)
	hb, operator := newBackend(t, shared, prefix)
	var wc watchCounter
	wb, _ := newBackendWith(t, shared, prefix, nil, wc.configure)
	holder := acquire(t, hb, request("k", grant(t, hb, 30*time.Second), "H"))

	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	l := grant(t, wb, 30*time.Second)
	reads := wc.watchReads.Load()
	w := start(ctx, wb, request("k", l, "W"))
	awaitCount(t, operator, prefix, 2)
	// Past the claim watch delay: the waiter's own claim is watched. The
	// read that closes a new watch's start gap may still be on its way,
	// so reads are bounded over the whole wait rather than compared.
	require.Eventually(t, func() bool { return wc.single.Load() == 2 }, waitBound, time.Millisecond, "the waiter's two watches")
	checks := wc.checks()
	window := time.NewTimer(300 * time.Millisecond)
	select {
	case res := <-w:
		t.Fatalf("W returned while H held the key: %+v", res)
	case <-window.C:
	}
	require.Equal(t, checks, wc.checks(), "requests other than watch reads sent by a waiting Acquire")
	require.LessOrEqual(t, wc.watchReads.Load()-reads, int64(2), "watch reads: at most one per watch the waiter started")
	require.NoError(t, hb.Release(testCtx(t, waitBound), holder))
	res := await(t, w, "W after H's release")
	require.NoError(t, res.err)
	require.NoError(t, wb.Release(testCtx(t, waitBound), res.claim))
}
