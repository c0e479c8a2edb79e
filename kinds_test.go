package ashlock_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// lockKinds are the kinds of lock a builder makes, each on key k (and k2
// for LockAll). The guarantees that live in the client - the local
// deadline, prompt loss, lease sharing - must hold for every kind.
var lockKinds = []struct {
	name  string
	build func(c *ashlock.LockClient, k string) *ashlock.LockBuilder
}{
	{"exclusive", func(c *ashlock.LockClient, k string) *ashlock.LockBuilder { return c.Lock(k) }},
	{"shared", func(c *ashlock.LockClient, k string) *ashlock.LockBuilder { return c.Lock(k).Shared() }},
	{"counted", func(c *ashlock.LockClient, k string) *ashlock.LockBuilder { return c.Lock(k).WithPermits(3) }},
	{"LockAll", func(c *ashlock.LockClient, k string) *ashlock.LockBuilder { return c.LockAll(k+"/b", k+"/a") }},
	{"shared LockAll", func(c *ashlock.LockClient, k string) *ashlock.LockBuilder { return c.LockAll(k+"/b", k+"/a").Shared() }},
}

// Guarantee 3 for every kind: a guard whose renewals fail is poisoned at
// the send time of its grant + TTL - margin, not later.
func TestEveryKindPoisonedAtLocalDeadline(t *testing.T) {
	for _, kind := range lockKinds {
		t.Run(kind.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, b := bubbleClient(t)
				start := time.Now()
				g, err := kind.build(c, "k").Acquire(t.Context())
				require.NoError(t, err)
				b.FailRenewals(errInjected)
				<-g.Done()
				assert.Equal(t, wdTTL-wdMargin, time.Since(start))
				assert.ErrorIs(t, g.Err(), ashlock.ErrLeaseExpired)
				_, err = g.FencingToken()
				assert.ErrorIs(t, err, ashlock.ErrLeaseExpired)
			})
		})
	}
}

// Guarantee 4 for every kind: a loss the backend sees (the lease ends, or
// an operator deletes the claim at one of its keys) ends the guard at once.
func TestEveryKindLossEndsGuardAtOnce(t *testing.T) {
	for _, kind := range lockKinds {
		t.Run(kind.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, b := bubbleClient(t)
				g, err := kind.build(c, "k").Acquire(t.Context())
				require.NoError(t, err)
				require.True(t, b.DeleteClaim(g.Keys()[len(g.Keys())-1]))
				synctest.Wait()
				select {
				case <-g.Done():
				default:
					t.Fatal("guard still valid after its claim was deleted")
				}
				assert.ErrorIs(t, g.Err(), ashlock.ErrLeaseExpired)
				assert.ErrorIs(t, g.SetValue(t.Context(), []byte("x")), ashlock.ErrLeaseExpired)
			})
		})
	}
}

// Guarantee 9 for every kind: guards with one TTL share one lease, and
// releasing one leaves the others held.
func TestEveryKindSharesOneLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := bubbleClient(t)
		var guards []*ashlock.Guard
		for i, kind := range lockKinds {
			g, err := kind.build(c, string(rune('a'+i))).Acquire(t.Context())
			require.NoError(t, err, kind.name)
			guards = append(guards, g)
		}
		first, err := guards[0].Claim()
		require.NoError(t, err)
		for i, g := range guards {
			claim, err := g.Claim()
			require.NoError(t, err)
			assert.Equal(t, first.Lease, claim.Lease, lockKinds[i].name)
		}
		require.NoError(t, guards[0].Unlock(t.Context()))
		time.Sleep(5 * wdTTL)
		for _, g := range guards[1:] {
			assert.NoError(t, g.Err())
		}
	})
}

// The accessors report what was asked for and what the backend granted.
func TestGuardReportsItsKind(t *testing.T) {
	c := newClient(t, ashlock.LockConfig{}, nil)
	ctx := testCtx(t)

	r, err := c.Lock("k").Shared().WithValue([]byte("v1")).Acquire(ctx)
	require.NoError(t, err)
	assert.True(t, r.Shared())
	assert.Equal(t, 0, r.Permit())
	assert.Equal(t, []string{"k"}, r.Keys())
	assert.Equal(t, []byte("v1"), r.Value())
	require.NoError(t, r.SetValue(ctx, []byte("v2")))
	assert.Equal(t, []byte("v2"), r.Value())
	info, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	assert.Equal(t, []byte("v2"), info.Holders[0].Value)
	assert.ErrorIs(t, r.SetValue(ctx, make([]byte, 64<<10+1)), ashlock.ErrInvalidConfig)
	require.NoError(t, r.Unlock(ctx))
	assert.ErrorIs(t, r.SetValue(ctx, []byte("v3")), ashlock.ErrUnlocked)
	info, err = c.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, info.Held)

	p0, err := c.Lock("pool").WithPermits(2).Acquire(ctx)
	require.NoError(t, err)
	p1, err := c.Lock("pool").WithPermits(2).Acquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1}, []int{p0.Permit(), p1.Permit()})
	assert.False(t, p0.Shared())

	all, err := c.LockAll("z", "x", "y").Acquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"x", "y", "z"}, all.Keys())
	assert.Equal(t, "x", all.Key())
	token, err := all.FencingToken()
	require.NoError(t, err)
	for _, k := range all.Keys() {
		info, err := c.Inspect(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, token, info.Token, k)
	}
	require.NoError(t, all.Unlock(ctx))
	for _, g := range []*ashlock.Guard{p0, p1} {
		require.NoError(t, g.Unlock(ctx))
	}
}

// A LockAll's value is published at each of its keys, so it is bounded in
// all (backend.MaxValueTotal) as well as per key: the guard's SetValue
// refuses a value over that bound with ErrInvalidConfig and keeps the old
// one.
func TestLockAllValueBoundedInAll(t *testing.T) {
	c := newClient(t, ashlock.LockConfig{}, nil)
	ctx := testCtx(t)
	keys := make([]string, backend.MaxKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	largest := make([]byte, backend.MaxValueTotal/backend.MaxKeys)
	g, err := c.LockAll(keys...).WithValue(largest).Acquire(ctx)
	require.NoError(t, err, "LockAll of %d keys with a %d-byte value", len(keys), len(largest))
	require.NoError(t, g.SetValue(ctx, []byte("v")))
	assert.ErrorIs(t, g.SetValue(ctx, make([]byte, len(largest)+1)), ashlock.ErrInvalidConfig)
	assert.Equal(t, []byte("v"), g.Value())
	info, err := c.Inspect(ctx, keys[63])
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	assert.Equal(t, []byte("v"), info.Holders[0].Value)
	require.NoError(t, g.Unlock(ctx))
}

// unlockDuringSetValue is a backend whose SetValue first lets the guard be
// unlocked (the release removes the claim), then asks the store, which no
// longer has the claim: a SetValue that crossed an Unlock.
type unlockDuringSetValue struct {
	backend.Backend
	unlock func()
}

func (u *unlockDuringSetValue) SetValue(ctx context.Context, c backend.Claim, v []byte) error {
	u.unlock()
	return u.Backend.SetValue(ctx, c, v)
}

// A SetValue that crosses the guard's Unlock returns the released guard's
// Err, ErrUnlocked, as one that comes after it does; not ErrLeaseExpired,
// which would report a loss that never happened.
func TestSetValueCrossingUnlock(t *testing.T) {
	m := memory.New()
	t.Cleanup(func() { _ = m.Close() })
	be := &unlockDuringSetValue{Backend: m}
	c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{Logger: quiet}, be)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	g, err := c.Lock("k").WithValue([]byte("v1")).Acquire(t.Context())
	require.NoError(t, err)
	be.unlock = func() { require.NoError(t, g.Unlock(t.Context())) }

	assert.ErrorIs(t, g.SetValue(t.Context(), []byte("v2")), ashlock.ErrUnlocked)
	assert.ErrorIs(t, g.Err(), ashlock.ErrUnlocked)
}
