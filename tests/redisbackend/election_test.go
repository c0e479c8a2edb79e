package redisbackend

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
)

// An election on Redis: the observer sees the first leader, its value
// change, the handoff to the second candidate and, when that one's lease
// is revoked by its client's Close, no leader.
func TestElectionOnRedis(t *testing.T) {
	ctx := ctxFor(t)
	b, _, _ := newBackend(t)
	c, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: 10 * time.Second}, b)
	require.NoError(t, err)
	defer c.Close(ctx)

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	leaders := make(chan ashlock.Leader, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for l, err := range c.Election("scheduler").Observe(octx) {
			if err != nil {
				return
			}
			leaders <- l
		}
	}()
	next := func(what string) ashlock.Leader {
		t.Helper()
		select {
		case l := <-leaders:
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change observed", what)
			return ashlock.Leader{}
		}
	}
	assert.Zero(t, next("no leader yet").Token)

	first, err := c.Election("scheduler").WithOwner("a").Campaign(ctx, []byte("10.0.0.1"))
	require.NoError(t, err)
	l := next("first leader")
	assert.Equal(t, "a", l.Owner)
	assert.Equal(t, []byte("10.0.0.1"), l.Value)
	require.NoError(t, first.SetValue(ctx, []byte("10.0.0.9")))
	assert.Equal(t, []byte("10.0.0.9"), next("value set").Value)

	c2, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: 10 * time.Second}, b)
	require.NoError(t, err)
	second := make(chan *ashlock.Guard, 1)
	go func() {
		g, err := c2.Election("scheduler").WithOwner("b").Campaign(ctx, []byte("10.0.0.2"))
		assert.NoError(t, err)
		second <- g
	}()
	awaitWaiting(t, b, "scheduler", 1)
	require.NoError(t, first.Unlock(ctx))
	l2 := next("handoff")
	assert.Equal(t, "b", l2.Owner)
	assert.Greater(t, l2.Token, l.Token)
	select {
	case <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("the second candidate's Campaign did not return")
	}
	require.NoError(t, c2.Close(ctx))
	assert.Zero(t, next("the second leader's client closed").Token)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Observe did not end with its context")
	}
}
