package redisbackend

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	redisb "github.com/ash-lock/ashlock/backend/redis"
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
	late := &lateWrites{marker: []byte(owner), open: make(chan struct{}), written: make(chan string, 1)}
	t.Cleanup(late.finish)
	wc := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Dialer: late.dial, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = wc.Close() })
	wb, err := redisb.New(ctx, wc, redisb.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = wb.Close() })
	lease := grant(t, wb, time.Minute)
	req.Lease = lease.ID
	_, err = wb.Acquire(ctx, req)
	require.ErrorIs(t, err, backend.ErrUnavailable, "the enqueue's reply never came")

	late.finish()
	var addr string
	select {
	case addr = <-late.written:
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

// lateWrites holds the writes that carry marker and the enqueue's mode
// ("fair") until finish, then sends them and closes their connection, as
// TCP delivers what was sent before a close; written gets the
// connection's local address.
type lateWrites struct {
	marker  []byte
	open    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	written chan string
}

func (l *lateWrites) finish() {
	l.once.Do(func() { close(l.open) })
	l.wg.Wait()
}

func (l *lateWrites) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lateConn{Conn: c, l: l}, nil
}

type lateConn struct {
	net.Conn
	l       *lateWrites
	mu      sync.Mutex
	holding bool
	closed  bool
	held    [][]byte
}

func (c *lateConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.holding && bytes.Contains(b, c.l.marker) && bytes.Contains(b, []byte("fair")) {
		c.holding = true
		c.l.wg.Add(1)
		go c.release()
	}
	if c.holding {
		c.held = append(c.held, bytes.Clone(b))
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// Close closes at once unless writes are held: then after them.
func (c *lateConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		c.closed = true
		return nil
	}
	return c.Conn.Close()
}

func (c *lateConn) release() {
	defer c.l.wg.Done()
	<-c.l.open
	c.mu.Lock()
	defer c.mu.Unlock()
	// The client's write deadline has passed by now; the network's has not.
	_ = c.Conn.SetWriteDeadline(time.Time{})
	for _, b := range c.held {
		if _, err := c.Conn.Write(b); err != nil {
			break
		}
	}
	c.held, c.holding = nil, false
	c.l.written <- c.Conn.LocalAddr().String()
	if c.closed {
		_ = c.Conn.Close()
	}
}
