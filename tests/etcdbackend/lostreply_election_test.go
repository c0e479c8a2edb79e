package etcdbackend_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/etcd"
)

// The lost enqueue reply of TestLostEnqueueReplyThenCancelLeavesNothingOfEveryKind,
// through Election.Campaign: the candidate's client runs on a backend that
// loses the reply of its first claim-creating Txn once armed, the rival
// leader's on a backend of its own under the same prefix.

// connectClient returns an ashlock client on b, closed in t.Cleanup
// (before b, whose Close was registered earlier).
func connectClient(t *testing.T, b *etcd.Backend) *ashlock.LockClient {
	t.Helper()
	c, err := ashlock.ConnectWith(testCtx(t, waitBound), ashlock.LockConfig{Logger: slog.New(slog.DiscardHandler)}, b)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close(context.Background())) })
	return c
}

// lostReplyElection sets up, under a prefix of its own, the candidate's
// client on a backend that loses the reply of its first claim-creating Txn
// once d.armed is closed, and the rival's client on a backend of its own.
// cli reads etcd; claims is where the claims are.
func lostReplyElection(t *testing.T) (d *dropReply, cli *clientv3.Client, claims string, candidate, rival *ashlock.LockClient) {
	t.Helper()
	prefix := uniquePrefix(t)
	d, b, cli := newDroppingBackend(t, prefix)
	rb, _ := newBackend(t, shared, prefix)
	return d, cli, prefix + "claims/", connectClient(t, b), connectClient(t, rb)
}

type campaignResult struct {
	g   *ashlock.Guard
	err error
}

// campaign starts the candidate's Campaign on election "e"; the channel
// delivers its result.
func campaign(ctx context.Context, c *ashlock.LockClient) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		g, err := c.Election("e").WithOwner("candidate").Campaign(ctx, []byte("candidate"))
		ch <- campaignResult{g, err}
	}()
	return ch
}

// awaitCampaign waits up to waitBound for a Campaign started by campaign.
func awaitCampaign(t *testing.T, ch <-chan campaignResult) campaignResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitBound):
		t.Fatalf("Campaign did not return within %v", waitBound)
		return campaignResult{}
	}
}

// A Campaign whose enqueue committed but whose reply was lost still leads:
// at once on a free election, and once the leader resigns when it had to
// wait. Its term is the create revision of the claim whose reply was lost
// (taken over, not made again: it keeps its place in line), greater than
// the previous leader's; etcd holds that one claim for it, and nothing is
// left once it resigns.
func TestCampaignWithLostEnqueueReplyLeads(t *testing.T) {
	for _, behind := range []bool{false, true} {
		name := "free election"
		if behind {
			name = "behind a leader"
		}
		t.Run(name, func(t *testing.T) {
			d, cli, claims, candidate, rival := lostReplyElection(t)
			ctx := testCtx(t, waitBound)

			var leader *ashlock.Guard
			var prevTerm uint64
			if behind {
				var err error
				leader, err = rival.Election("e").Campaign(ctx, []byte("rival"))
				require.NoError(t, err)
				prevTerm, err = leader.FencingToken()
				require.NoError(t, err)
			}
			close(d.armed)
			ch := campaign(ctx, candidate)
			awaitDropped(t, d)
			// The enqueue was applied before its reply was lost: its claim
			// is the newest under the prefix, and must be the one that leads.
			resp, err := cli.Get(ctx, claims, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))
			require.NoError(t, err)
			require.Len(t, resp.Kvs, map[bool]int{false: 1, true: 2}[behind], "claims once the enqueue reply was lost")
			enqueued := resp.Kvs[0].CreateRevision
			if behind {
				select {
				case r := <-ch:
					t.Fatalf("Campaign returned while the rival leads: %v", r.err)
				default:
				}
				require.NoError(t, leader.Unlock(ctx))
			}
			r := awaitCampaign(t, ch)
			require.NoError(t, r.err, "Campaign after its enqueue reply was lost")
			term, err := r.g.FencingToken()
			require.NoError(t, err)
			assert.Greater(t, term, prevTerm)
			assert.Equal(t, uint64(enqueued), term, "the term is not the claim whose enqueue reply was lost")
			l, err := rival.Election("e").Leader(ctx)
			require.NoError(t, err)
			assert.Equal(t, term, l.Token)
			assert.Equal(t, "candidate", string(l.Value))
			assert.Equal(t, "candidate", l.Owner)
			assert.Len(t, keys(t, cli, claims), 1, "claims while the candidate leads")

			require.NoError(t, r.g.Unlock(ctx))
			assert.Empty(t, keys(t, cli, claims), "claims after the candidate resigned")
			_, err = rival.Election("e").Leader(ctx)
			assert.ErrorIs(t, err, ashlock.ErrNoLeader)
		})
	}
}

// A Campaign waiting behind a leader, whose enqueue reply was lost,
// cancelled right then: it returns the context's error and leaves nothing
// behind, though it never learnt its claim's revision; once the leader
// resigns nobody leads.
func TestCampaignWithLostEnqueueReplyCancelledLeavesNothing(t *testing.T) {
	d, cli, claims, candidate, rival := lostReplyElection(t)
	ctx := testCtx(t, waitBound)

	leader, err := rival.Election("e").Campaign(ctx, []byte("rival"))
	require.NoError(t, err)
	held := keys(t, cli, claims)
	require.Len(t, held, 1)

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	close(d.armed)
	ch := campaign(cctx, candidate)
	awaitDropped(t, d)
	cancel()
	r := awaitCampaign(t, ch)
	assert.Nil(t, r.g)
	require.ErrorIs(t, r.err, context.Canceled)
	assert.Equal(t, held, keys(t, cli, claims), "the cancelled Campaign left a claim")
	info, err := rival.Inspect(ctx, "e")
	require.NoError(t, err)
	assert.Empty(t, info.Waiters)

	require.NoError(t, leader.Unlock(ctx))
	_, err = rival.Election("e").Leader(ctx)
	assert.ErrorIs(t, err, ashlock.ErrNoLeader, "the cancelled candidate leads")
	assert.Empty(t, keys(t, cli, claims))
}
