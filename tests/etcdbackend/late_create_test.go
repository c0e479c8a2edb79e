package etcdbackend_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// newLateCreate returns a lateRequest for the next Txn that may put a claim
// under prefix: a create held up on the way, applied after requests sent
// later.
func newLateCreate(t *testing.T, prefix string) *lateRequest[pb.TxnResponse] {
	return newLateRequest[pb.TxnResponse](t, "the late create", func(req any) bool {
		txn, ok := req.(*pb.TxnRequest)
		return ok && putsClaim(txn, prefix)
	})
}

// An Acquire whose create got no answer, and which etcd applies only after
// the Acquire's cleanup has deleted the claim by name, leaves nothing that
// blocks the key while its lease lives: the late create fails (the cleanup
// moved the lease's fence), at every key of a multi-key claim, and another
// client takes the keys while the lease is still alive.
func TestLateCreateLeavesNoStray(t *testing.T) {
	for _, tt := range []struct {
		name string
		keys []string
	}{{"single key", nil}, {"multi-key", []string{"k", "m"}}} {
		t.Run(tt.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			lc := newLateCreate(t, prefix)
			b, cli := newBackend(t, shared, prefix, lc.configure)
			other, _ := newBackend(t, shared, prefix)
			l, lo := grant(t, b, 30*time.Second), grant(t, other, 30*time.Second)

			r := request("k", l, "late")
			r.Keys, r.Fair = tt.keys, false // a non-queued create is tried once
			lc.armed.Store(true)
			_, err := b.Acquire(testCtx(t, waitBound), r)
			require.ErrorIs(t, err, backend.ErrUnavailable, "Acquire whose create got no answer")
			require.Empty(t, keys(t, cli, prefix+"claims/"), "claims after the failed Acquire's cleanup")
			applied, _ := lc.apply(t)
			require.NotNil(t, applied, "the late create was refused")
			require.False(t, applied.Succeeded, "the late create's compares")
			require.Empty(t, keys(t, cli, prefix+"claims/"), "claims after the late create")

			o := request("k", lo, "other")
			o.Keys = tt.keys
			c := acquire(t, other, o)
			_, err = b.KeepAlive(testCtx(t, waitBound), l.ID)
			require.NoError(t, err, "the late create's lease, once the other client holds the key")
			release(t, other, c)
			assert.Empty(t, keys(t, cli, prefix+"claims/"), "claims left")
		})
	}
}

// A fair Acquire whose first create got no answer sends it again and holds
// the key; that first try, applied only after the claim's release, makes
// nothing (the Acquire moved its lease's fence once it had an answer), so
// the key is free for another client while the lease lives.
func TestLateFirstTryOfRetriedEnqueueMakesNothing(t *testing.T) {
	prefix := uniquePrefix(t)
	lc := newLateCreate(t, prefix)
	b, cli := newBackend(t, shared, prefix, lc.configure)
	other, _ := newBackend(t, shared, prefix)
	l, lo := grant(t, b, 30*time.Second), grant(t, other, 30*time.Second)

	lc.armed.Store(true)
	c := acquire(t, b, request("k", l, "retried"))
	release(t, b, c)
	require.Empty(t, keys(t, cli, prefix+"claims/"), "claims after the release")
	applied, _ := lc.apply(t)
	require.NotNil(t, applied, "the late first try was refused")
	require.False(t, applied.Succeeded, "the late first try's compares")
	require.Empty(t, keys(t, cli, prefix+"claims/"), "claims after the late first try")

	o := acquire(t, other, request("k", lo, "other"))
	release(t, other, o)
}

// A create compares the lease's fence with a revision its Backend saw. A
// fence put later than that - here by hand, as another Backend sharing the
// lease would after a lost reply - fails the create once; the Acquire then
// reads the fence, learns its revision and sends the create again, and
// holds, with one claim made.
func TestFenceMovedElsewhereIsLearned(t *testing.T) {
	for _, tt := range []struct {
		name          string
		fair, counted bool
	}{{"fair", true, false}, {"fair counted", true, true}, {"not queued", false, false}} {
		t.Run(tt.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			b, cli := newBackend(t, shared, prefix)
			l := grant(t, b, 30*time.Second)
			fence := prefix + "fences/" + strconv.FormatInt(int64(l.ID), 16)
			_, err := cli.Put(testCtx(t, waitBound), fence, "", clientv3.WithLease(clientv3.LeaseID(l.ID)))
			require.NoError(t, err, "putting the fence")

			r := request("k", l, "refenced")
			r.Fair = tt.fair
			if tt.counted {
				r.Permits = 3
			}
			c := acquire(t, b, r)
			require.Len(t, keys(t, cli, prefix+"claims/"), 1, "claims once the Acquire holds")
			release(t, b, c)
			assert.Empty(t, keys(t, cli, prefix+"claims/"), "claims left")
		})
	}
}
