package etcdbackend_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// A multi-key claim deleted at one of its keys (by an operator) is gone as
// a whole: the Backend removes it from its other keys without waiting for
// its Release, so they do not stay blocked while its lease lives on; a new
// claim of the same lease at one of them is a claim of its own, with a
// higher token, not the remains of the lost one taken over; and the lost
// claim's late Release leaves that new claim alone.
func TestMultiKeyLossRemovesTheRest(t *testing.T) {
	prefix := uniquePrefix(t)
	b, cli := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	lost := newLostSignal()
	req := request("a", l, "m")
	req.Keys = []string{"a", "b", "c"}
	req.OnLost = backend.LossFunc(lost.onLost)
	m := acquire(t, b, req)
	_, err := cli.Delete(testCtx(t, waitBound), prefix+"claims/a/"+m.ID)
	require.NoError(t, err)
	lost.await(t, waitBound, time.Now())

	// Nothing of the lost claim is left at b and c, with no Release.
	awaitCount(t, cli, prefix+"claims/", 0)

	n := acquire(t, b, request("b", l, "n"))
	assert.Greater(t, n.Token, m.Token, "the token of a later claim of b")
	other := grant(t, b, 30*time.Second)
	ch := start(testCtx(t, waitBound), b, request("c", other, "o"))
	o := await(t, ch, "another lease's claim of c")
	require.NoError(t, o.err)
	assert.Greater(t, o.claim.Token, m.Token, "the token of a later claim of c")

	require.NoError(t, b.Release(testCtx(t, waitBound), m), "the lost claim's late Release")
	assert.ElementsMatch(t, []string{prefix + "claims/b/" + n.ID, prefix + "claims/c/" + o.claim.ID},
		keys(t, cli, prefix+"claims/"), "the claims made after the loss")
	release(t, b, n)
	release(t, b, o.claim)
}
