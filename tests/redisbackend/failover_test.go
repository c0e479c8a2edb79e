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
