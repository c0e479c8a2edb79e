package redisbackend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// With keyspace notifications off, nothing tells a waiter that its lease
// was deleted while it waited: a release it hears is then no handoff, and
// it must find its claim gone (reaped with the lease) rather than take the
// key on a lease that no longer exists, which a rival's read reaps at once.
func TestWaiterOnADeletedLeaseTakesNoHandoffWithoutNotifications(t *testing.T) {
	ctx := ctxFor(t)
	rc := notificationsOff(t)
	quiet := quietLogger()
	hb, _, prefix := newBackend(t, redisb.WithLogger(quiet))
	holder, err := hb.Acquire(ctx, request("deleted-waiter", grant(t, hb, time.Minute), "H"))
	require.NoError(t, err)

	// The release comes once the waiter has checked the holder after its
	// subscription was confirmed: the waiter hears it.
	_, wl, p := startHeardWaiter(t, client(t), prefix, hb, holder, request("deleted-waiter", backend.Lease{}, "W"),
		redisb.WithLogger(quiet))

	require.NoError(t, rc.Del(ctx, leaseKey(prefix, wl.ID)).Err())
	require.NoError(t, hb.Release(ctx, holder))
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return within 10s")
	}
	if p.err == nil {
		// Show what the claim returned is worth: a rival takes the key.
		rival, err := hb.Acquire(ctx, try(request("deleted-waiter", grant(t, hb, time.Minute), "R")))
		t.Errorf("the waiter acquired token %d on a deleted lease; a rival then acquired: token %d, error %v",
			p.claim.Token, rival.Token, err)
		return
	}
	require.ErrorIs(t, p.err, backend.ErrLeaseExpired)
}

// A lease evicted under memory pressure (maxmemory with a volatile-*
// policy evicts the keys that expire, which are the leases) ends as a
// deleted one does: with the eviction notified ('e' among the keyspace
// notifications), its holders are told at once, not at their next
// renewal while a rival's read has already reaped their claims.
func TestEvictedLeaseReachesItsHolderAtOnce(t *testing.T) {
	ctx := ctxFor(t)
	// A server of its own: its memory limit would evict the leases of
	// every other test.
	rc := ownServer(t)
	require.NoError(t, rc.ConfigSet(ctx, "notify-keyspace-events", "KEgxe").Err())
	require.NoError(t, rc.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err())
	prefix := redistest.Prefix()
	b, err := redisb.New(ctx, rc, redisb.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	l := grant(t, b, time.Minute)
	lost := make(chan error, 1)
	req := request("evicted", l, "H")
	req.OnLost = backend.LossFunc(func(err error) { lost <- err })
	_, err = b.Acquire(ctx, req)
	require.NoError(t, err)

	require.NoError(t, rc.ConfigSet(ctx, "maxmemory", "1").Err())
	// Refused for want of memory once nothing is left to evict.
	_ = rc.Set(ctx, "pressure", "x", 0).Err()
	require.NoError(t, rc.ConfigSet(ctx, "maxmemory", "0").Err())
	n, err := rc.Exists(ctx, leaseKey(prefix, l.ID)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the lease was not evicted")
	select {
	case err := <-lost:
		require.ErrorIs(t, err, backend.ErrLeaseExpired)
	case <-time.After(5 * time.Second):
		t.Fatal("the holder of an evicted lease was not told within 5s")
	}
}
