package etcdbackend_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// A waiting LockAll (a multi-key claim, exclusive or shared) does not
// poll: while it waits it sends no request and gets no watch event, and a
// release at one of its keys costs it a constant number of requests and
// events, whether it waited a moment or long enough (over a second) for
// its own claim's loss watches to start.
//
// M asks for a, b and c while another client holds a and b. It holds c
// from its enqueue and waits at a, then at b. The release at a wakes it
// for one Txn, which takes a; it then watches the claim at b and waits
// again, sending nothing. The release at b wakes it for two: the Txn that
// takes b and the check that it still exists at every key. The windows in
// which nothing may be sent are the point of the test, not a stand-in for
// synchronisation.
func TestMultiKeyWaiterDoesNotPoll(t *testing.T) {
	for _, kind := range []string{"exclusive", "shared"} {
		for _, wait := range []time.Duration{100 * time.Millisecond, 1200 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/%v", kind, wait), func(t *testing.T) {
				prefix := uniquePrefix(t)
				hb, operator := newBackend(t, shared, prefix)
				var wc watchCounter
				var wl watchLog
				wb, _ := newBackend(t, shared, prefix, wc.configure, wl.configure)
				hl := grant(t, hb, 30*time.Second)
				ha := acquire(t, hb, request("a", hl, "Ha"))
				hbk := acquire(t, hb, request("b", hl, "Hb"))

				req := request("a", grant(t, wb, 30*time.Second), "M")
				req.Keys, req.Shared = []string{"a", "b", "c"}, kind == "shared"
				var m <-chan result
				watching := func(holder string) {
					t.Helper()
					wl.await(t, "M's watch of "+holder, func(creates []*pb.WatchCreateRequest) bool {
						return slices.ContainsFunc(creates, func(cr *pb.WatchCreateRequest) bool { return string(cr.Key) == holder })
					})
				}
				// quiet waits out the window and checks that M sent
				// nothing meanwhile but the reads that close the start
				// gaps of watches it created (its loss watches, in the
				// long wait): at most one per watch since it started,
				// as a read may follow its watch's create late.
				watches := func() int64 { return wc.single.Load() + wc.ranged.Load() }
				reads0, watches0 := wc.watchReads.Load(), watches()
				quiet := func(what string) {
					t.Helper()
					checks, events := wc.checks(), wc.events.Load()
					window := time.NewTimer(wait)
					defer window.Stop()
					select {
					case r := <-m:
						t.Fatalf("%s: M returned (token %d, err %v)", what, r.claim.Token, r.err)
					case <-window.C:
					}
					assert.Equal(t, checks, wc.checks(), "%s: requests other than watch reads", what)
					assert.Equal(t, events, wc.events.Load(), "%s: watch events", what)
					assert.LessOrEqual(t, wc.watchReads.Load()-reads0, watches()-watches0,
						"%s: watch reads, at most one per watch created", what)
				}

				m = start(testCtx(t, waitBound), wb, req)
				awaitCount(t, operator, prefix+"claims/", 5)
				watching(hb.ClaimKey(ha))
				quiet("M waiting at a")

				checks, events := wc.checks(), wc.events.Load()
				require.NoError(t, hb.Release(testCtx(t, waitBound), ha))
				watching(hb.ClaimKey(hbk)) // M took a and waits at b
				t.Logf("release at a: %d requests, %d watch events", wc.checks()-checks, wc.events.Load()-events)
				assert.LessOrEqual(t, wc.checks()-checks, int64(1), "requests for the release at a: the Txn that takes a")
				assert.LessOrEqual(t, wc.events.Load()-events, int64(1), "watch events for the release at a: the delete")
				notYet(t, m, "M waiting at b")
				quiet("M waiting at b")

				checks, events = wc.checks(), wc.events.Load()
				require.NoError(t, hb.Release(testCtx(t, waitBound), hbk))
				r := await(t, m, "M after the release at b")
				require.NoError(t, r.err)
				t.Logf("release at b: %d requests, %d watch events", wc.checks()-checks, wc.events.Load()-events)
				assert.LessOrEqual(t, wc.checks()-checks, int64(2), "requests for the release at b: the Txn that takes b, the check of every key")
				assert.LessOrEqual(t, wc.events.Load()-events, int64(1), "watch events for the release at b: the delete")
				for _, k := range req.Keys {
					info, err := hb.Inspect(testCtx(t, waitBound), k)
					require.NoError(t, err)
					assert.Equal(t, r.claim.Token, info.Token, "holder of %s", k)
				}
				require.NoError(t, wb.Release(testCtx(t, waitBound), r.claim))
			})
		}
	}
}
