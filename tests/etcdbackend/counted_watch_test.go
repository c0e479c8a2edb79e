package etcdbackend_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// A counted lock's first waiter waits for any of its n holders with one
// watch of the queue directory, not one watch per holder: with 8 permits,
// an admission still creates two watches (the admitted claim's loss
// watch, and the next waiter's directory watch as the new first waiter)
// and costs the same requests and events as with 2.
func TestCountedFirstWaiterWatchesOnce(t *testing.T) {
	prefix := uniquePrefix(t)
	var wc watchCounter
	b, cli := newBackend(t, shared, prefix, wc.configure)
	l := grant(t, b, 30*time.Second)
	dir := prefix + "claims/k/"
	const n, waiters = 8, 2
	var holders []backend.Claim
	for i := range n {
		holders = append(holders, acquire(t, b, countedReq("k", l, fmt.Sprint("h", i), n)))
	}
	chs := queueCounted(testCtx(t, waitBound), t, b, cli, dir, l, n, waiters)
	time.Sleep(100 * time.Millisecond)
	creates, checks, events := wc.single.Load()+wc.ranged.Load(), wc.checks(), wc.events.Load()
	release(t, b, holders[3])
	r := await(t, chs[0], "first waiter")
	require.NoError(t, r.err)
	assert.Equal(t, 3, r.claim.Permit)
	time.Sleep(100 * time.Millisecond) // the next waiter settles
	notYet(t, chs[1], "second waiter")
	assert.LessOrEqual(t, wc.single.Load()+wc.ranged.Load()-creates, int64(2), "watches created")
	// The release; the first waiter's check and permit Txns; the second
	// waiter's check (reads that start loss watches are left out, see
	// checks).
	assert.LessOrEqual(t, wc.checks()-checks, int64(4), "requests")
	assert.LessOrEqual(t, wc.events.Load()-events, int64(3), "watch events")

	release(t, b, r.claim)
	r = await(t, chs[1], "second waiter")
	require.NoError(t, r.err)
	assert.Equal(t, 3, r.claim.Permit)
	release(t, b, r.claim)
	for i, c := range holders {
		if i != 3 {
			release(t, b, c)
		}
	}
}
