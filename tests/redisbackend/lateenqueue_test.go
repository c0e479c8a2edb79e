package redisbackend

import (
	"bytes"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/internal/heldconn"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// An enqueue that reaches the server only after its Acquire has given up
// (its reply not come by the client's read timeout) and removed its claim
// by name - the removal, on another connection, overtook it, as a segment
// retransmitted after a partition heals would be overtaken - adds the
// claim after all. Bound to a lease that lives on, it would come to hold
// the key when the holder ahead releases, and nobody would ever release
// it: the lease's next renewal finds an index entry that no claim of the
// Backend accounts for and removes it.
func TestAClaimLeftBehindGoesAtTheNextRenewal(t *testing.T) {
	ctx := ctxFor(t)
	prefix := redistest.Prefix()
	hb, rc, _ := newBackendPrefix(t, prefix)
	holder, err := hb.Acquire(ctx, request("late", grant(t, hb, time.Minute), "H"))
	require.NoError(t, err)

	// The Backend names the claim (the root package lets it): the owner
	// marks the enqueue to hold back.
	const owner = "late-enqueue-owner"
	req := request("late", backend.Lease{}, owner)
	req.ID = ""
	// Its writes are held from the enqueue's on (its owner and its mode).
	late := heldconn.New(func(b []byte) bool { return bytes.Contains(b, []byte(owner)) && bytes.Contains(b, []byte("fair")) }, nil)
	t.Cleanup(late.Finish)
	wc := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Dialer: late.Dial, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = wc.Close() })
	wb, err := redisb.New(ctx, wc, redisb.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = wb.Close() })
	lease := grant(t, wb, time.Minute)
	req.Lease = lease.ID
	_, err = wb.Acquire(ctx, req)
	require.ErrorIs(t, err, backend.ErrUnavailable, "the enqueue's reply never came")

	late.Finish()
	var addr string
	select {
	case addr = <-late.Sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the held enqueue was never sent")
	}
	// Once the server has dropped that connection, it has run what came
	// on it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := rc.ClientList(ctx).Result()
		require.NoError(t, err)
		if !strings.Contains(list, "addr="+addr+" ") {
			break
		}
		require.True(t, time.Now().Before(deadline), "the server still serves %s", addr)
		time.Sleep(5 * time.Millisecond)
	}
	owners := func() []string {
		info, err := hb.Inspect(ctx, "late")
		require.NoError(t, err)
		var out []string
		for _, w := range info.Waiters {
			out = append(out, w.Owner)
		}
		return out
	}
	require.Contains(t, owners(), owner, "the late enqueue added the claim its Acquire had removed")

	_, err = wb.KeepAlive(ctx, lease.ID)
	require.NoError(t, err)
	assert.NotContains(t, owners(), owner, "the renewal left the claim behind")
	require.NoError(t, hb.Release(ctx, holder))
	_, err = hb.Acquire(ctx, try(request("late", grant(t, hb, time.Minute), "R")))
	assert.NoError(t, err, "the key is free once its holder has released")
}
