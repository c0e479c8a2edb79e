package redisbackend

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// A server that lost its last writes (a failover to a replica that had
// not received them, a restart without persistence) still issues tokens
// and lease ids above the lost ones: both are never below the server's
// clock. Simulated by rolling the counters back and dropping the lease and
// the claim, as such a server would have them.
func TestLostWritesDoNotReuseTokensOrLeases(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	lost := grant(t, b, time.Minute)
	c, err := b.Acquire(ctx, request("failover", lost, "before"))
	require.NoError(t, err)

	tag := "{" + prefix + "}"
	require.NoError(t, rc.Set(ctx, tag+"token", "1", 0).Err())
	require.NoError(t, rc.Set(ctx, tag+"leases", "1", 0).Err())
	require.NoError(t, rc.Del(ctx, leaseKey(prefix, lost.ID), tag+"q:failover", tag+"c:failover", tag+"lc:"+strconv.FormatInt(int64(lost.ID), 10)).Err())

	l := grant(t, b, time.Minute)
	assert.Greater(t, l.ID, lost.ID, "a lease id handed out again")
	_, err = b.KeepAlive(ctx, lost.ID)
	assert.ErrorIs(t, err, backend.ErrLeaseExpired, "the lost lease renewed")
	c2, err := b.Acquire(ctx, request("failover", l, "after"))
	require.NoError(t, err)
	assert.Greater(t, c2.Token, c.Token, "a token not above one the lost writes had issued")
	require.NoError(t, b.Release(ctx, c2))
}

// A claim the store lost while its lease survived (a failover that kept
// the grant but dropped a later acquisition) is found at the lease's next
// renewal: the lease is revoked and its holders are told.
func TestLostClaimFoundAtRenewal(t *testing.T) {
	ctx := ctxFor(t)
	b, rc, prefix := newBackend(t)
	l := grant(t, b, time.Minute)
	lost := make(chan error, 1)
	r := request("dropped", l, "H")
	r.OnLost = backend.LossFunc(func(err error) { lost <- err })
	c, err := b.Acquire(ctx, r)
	require.NoError(t, err)
	_, err = b.KeepAlive(ctx, l.ID)
	require.NoError(t, err)

	tag := "{" + prefix + "}"
	require.NoError(t, rc.Del(ctx, tag+"q:dropped", tag+"c:dropped").Err())
	require.NoError(t, rc.SRem(ctx, tag+"lc:"+strconv.FormatInt(int64(l.ID), 10), c.ID+"\ndropped").Err())

	_, err = b.KeepAlive(ctx, l.ID)
	assert.ErrorIs(t, err, backend.ErrLeaseExpired)
	select {
	case err := <-lost:
		assert.ErrorIs(t, err, backend.ErrLeaseExpired)
	case <-time.After(5 * time.Second):
		t.Fatal("OnLost not called")
	}
	n, err := rc.Exists(ctx, leaseKey(prefix, l.ID)).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the lease was not revoked")
}

// Releases and acquisitions racing renewals are never taken for lost
// claims.
func TestRenewalsRacingReleasesFindNoLoss(t *testing.T) {
	ctx := ctxFor(t)
	b, _, _ := newBackend(t)
	l := grant(t, b, time.Minute)
	stop := make(chan struct{})
	done := make(chan error, 4)
	for w := range 3 {
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				r := request("race/"+strconv.Itoa(w), l, "W")
				if i%2 == 1 {
					r = multi(r, "race/"+strconv.Itoa(w), "race/x"+strconv.Itoa(w))
				}
				c, err := b.Acquire(ctx, r)
				if err == nil {
					err = b.Release(ctx, c)
				}
				if err != nil {
					done <- err
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(time.Second)
	renewals := 0
	for time.Now().Before(deadline) {
		_, err := b.KeepAlive(ctx, l.ID)
		require.NoError(t, err, "after %d renewals", renewals)
		renewals++
	}
	close(stop)
	for range 3 {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("a worker did not stop")
		}
	}
	t.Logf("%d renewals raced acquisitions and releases", renewals)
}
