package client_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// lockKinds are the kinds of lock a builder makes on etcd; every guarantee
// the client gives the mutex must hold for each.
var lockKinds = []struct {
	name  string
	build func(c *ashlock.LockClient) *ashlock.LockBuilder
}{
	{"shared", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").Shared() }},
	{"counted", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.Lock("k").WithPermits(3) }},
	{"LockAll", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.LockAll("k/b", "k/a", "k/c") }},
	{"shared LockAll", func(c *ashlock.LockClient) *ashlock.LockBuilder { return c.LockAll("k/b", "k/a").Shared() }},
}

// deleteClaimsOf deletes, as an operator would, every key under prefix
// whose create revision is token, and returns how many it deleted.
func deleteClaimsOf(t *testing.T, cli *clientv3.Client, prefix string, token uint64) int {
	t.Helper()
	ctx := testCtx(t)
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	require.NoError(t, err)
	n := 0
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == int64(token) {
			_, err := cli.Delete(ctx, string(kv.Key))
			require.NoError(t, err)
			n++
		}
	}
	return n
}

// Guarantee 4 for every kind: an operator's delete of the claim (at any
// one of its keys) poisons the guard through its watch, long before the
// 10s renewal would notice.
func TestEveryKindOperatorDeletePoisonsPromptly(t *testing.T) {
	for _, kind := range lockKinds {
		t.Run(kind.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			cli := shared.Client(t, nil)
			c := connect(t, shared, prefix, ashlock.LockConfig{DefaultTTL: 30 * time.Second})
			ctx := testCtx(t)
			g, err := kind.build(c).Acquire(ctx)
			require.NoError(t, err)
			token, err := g.FencingToken()
			require.NoError(t, err)
			// Delete at the last key only: losing one key loses the lock.
			last := g.Keys()[len(g.Keys())-1]
			info, err := c.Inspect(ctx, last)
			require.NoError(t, err)
			require.Equal(t, token, info.Token)
			resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
			require.NoError(t, err)
			deleted := false
			for _, kv := range resp.Kvs {
				if kv.CreateRevision == int64(token) && !deleted && isClaimOf(string(kv.Key), last) {
					_, err := cli.Delete(ctx, string(kv.Key))
					require.NoError(t, err)
					deleted = true
				}
			}
			require.True(t, deleted, "no claim of token %d at %q", token, last)
			select {
			case <-g.Done():
			case <-time.After(2 * time.Second):
				t.Fatal("guard still valid 2s after its claim was deleted (renewals are 10s apart)")
			}
			assert.ErrorIs(t, g.Err(), ashlock.ErrLeaseExpired)
			// Unlock removes what is left of the claim at its other keys.
			assert.ErrorIs(t, g.Unlock(ctx), ashlock.ErrLeaseExpired)
			assert.Equal(t, int64(0), keysUnder(t, cli, prefix+"claims/"))
		})
	}
}

// SetValue compares on the claim's identity: once the claim is gone it
// changes nothing, poisons the guard and says ErrLeaseExpired, even if the
// guard has not heard of the loss yet.
func TestEveryKindSetValueAfterDeleteIsRefused(t *testing.T) {
	for _, kind := range lockKinds {
		t.Run(kind.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			cli := shared.Client(t, nil)
			c := connect(t, shared, prefix, ashlock.LockConfig{DefaultTTL: 30 * time.Second})
			ctx := testCtx(t)
			g, err := kind.build(c).WithValue([]byte("v1")).Acquire(ctx)
			require.NoError(t, err)
			require.NoError(t, g.SetValue(ctx, []byte("v2")))
			info, err := c.Inspect(ctx, g.Key())
			require.NoError(t, err)
			require.Len(t, info.Holders, 1)
			assert.Equal(t, []byte("v2"), info.Holders[0].Value)

			token, err := g.FencingToken()
			require.NoError(t, err)
			require.Equal(t, len(g.Keys()), deleteClaimsOf(t, cli, prefix, token))
			assert.ErrorIs(t, g.SetValue(ctx, []byte("v3")), ashlock.ErrLeaseExpired)
			assert.ErrorIs(t, g.Err(), ashlock.ErrLeaseExpired)
			assert.Equal(t, int64(0), keysUnder(t, cli, prefix+"claims/"), "SetValue recreated a claim")
		})
	}
}

// Guarantee 7 for every kind: Unlock removes the claim at every key, and a
// second Unlock after the next holder came does not remove the newcomer's.
func TestEveryKindUnlockRemovesOnlyItsOwnClaim(t *testing.T) {
	for _, kind := range lockKinds {
		t.Run(kind.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			cli := shared.Client(t, nil)
			c := connect(t, shared, prefix, ashlock.LockConfig{})
			ctx := testCtx(t)
			g, err := kind.build(c).Acquire(ctx)
			require.NoError(t, err)
			require.NoError(t, g.Unlock(ctx))
			assert.Equal(t, int64(0), keysUnder(t, cli, prefix+"claims/"))
			next, err := kind.build(c).Acquire(ctx)
			require.NoError(t, err)
			require.NoError(t, g.Unlock(ctx))
			assert.NoError(t, next.Err())
			assert.Equal(t, int64(len(next.Keys())), keysUnder(t, cli, prefix+"claims/"))
			require.NoError(t, next.Unlock(ctx))
		})
	}
}

// isClaimOf reports whether etcd key k is a claim of lock key key: claims
// live in the directory "claims/<key with '/' escaped as %2F>/".
func isClaimOf(k, key string) bool {
	return strings.Contains(k, "claims/"+strings.ReplaceAll(key, "/", "%2F")+"/")
}

// Guarantee 3 for every kind on etcd: with etcd stopped, every guard is
// poisoned at the conservative local deadline, before its lease can have
// expired on the server.
func TestEveryKindPoisonedAtLocalDeadlineWhileEtcdIsDown(t *testing.T) {
	c := etcdtest.Start(t)
	ctx := testCtx(t)
	guards := make([]*ashlock.Guard, len(lockKinds))
	for i, kind := range lockKinds {
		// A prefix each: the kinds use the same key names.
		lc := connect(t, c, uniquePrefix(t), ashlock.LockConfig{DefaultTTL: 3 * time.Second})
		g, err := kind.build(lc).Acquire(ctx)
		require.NoError(t, err, kind.name)
		guards[i] = g
	}
	start := time.Now()
	c.StopMember(0)
	for i, g := range guards {
		select {
		case <-g.Done():
		case <-time.After(waitBound):
			t.Fatalf("%s: guard still valid %v after etcd stopped (TTL 3s)", lockKinds[i].name, waitBound)
		}
		assert.ErrorIs(t, g.Err(), ashlock.ErrLeaseExpired, lockKinds[i].name)
	}
	assert.Less(t, time.Since(start), 3*time.Second, "poisoned after the lease could have expired")
}
