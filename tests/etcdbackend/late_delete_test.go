package etcdbackend_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/ash-lock/ashlock/backend"
)

// A Release whose delete got no answer, retried with success, leaves the
// claim's name taken: the next claim of the same lease on the key gets
// another name, so that the first delete, applied late, removes nothing
// of it.
func TestLateReleaseDeleteSparesTheNextClaim(t *testing.T) {
	prefix := uniquePrefix(t)
	// The next Delete, once armed, is held and applied late.
	d := newLateRequest[pb.DeleteRangeResponse](t, "the late delete", func(req any) bool {
		_, ok := req.(*pb.DeleteRangeRequest)
		return ok
	})
	b, cli := newBackend(t, shared, prefix, d.configure)
	l := grant(t, b, 30*time.Second)
	c := acquire(t, b, request("k", l, "first"))
	d.armed.Store(true)
	require.ErrorIs(t, b.Release(testCtx(t, waitBound), c), backend.ErrUnavailable)
	require.NoError(t, b.Release(testCtx(t, waitBound), c), "the retried Release")

	n := acquire(t, b, request("k", l, "next"))
	assert.NotEqual(t, c.ID, n.ID, "the next claim's name")
	_, err := d.apply(t)
	require.NoError(t, err, "the late delete")
	assert.Equal(t, []string{prefix + "claims/k/" + n.ID}, keys(t, cli, prefix+"claims/"))
	release(t, b, n)
}
