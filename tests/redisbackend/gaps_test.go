package redisbackend

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// splitProxy forwards to the server and back. Once armed with a marker,
// it cuts the next chunk from the server holding it before the start of
// the chunk's last bulk string, and holds the rest for splitHold: longer
// than a subscriber's read waits, so the read times out inside a reply,
// as when a network delivers a message in two segments far apart.
type splitProxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	marker []byte
	split  chan struct{} // closed when the armed chunk has been delivered whole
}

const splitHold = 3 * time.Second

func newSplitProxy(t *testing.T) *splitProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &splitProxy{ln: ln}
	var conns sync.Map
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", srv.Addr())
			if err != nil {
				_ = in.Close()
				continue
			}
			conns.Store(in, out)
			p.wg.Add(2)
			go func() { defer p.wg.Done(); p.pipe(in, out, false) }()
			go func() { defer p.wg.Done(); p.pipe(out, in, true) }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		conns.Range(func(in, out any) bool {
			_ = in.(net.Conn).Close()
			_ = out.(net.Conn).Close()
			return true
		})
		p.wg.Wait()
	})
	return p
}

func (p *splitProxy) addr() string { return p.ln.Addr().String() }

// arm makes the proxy split the next chunk from the server that holds
// marker; the channel returned is closed once that chunk is delivered.
func (p *splitProxy) arm(marker string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker, p.split = []byte(marker), make(chan struct{})
	return p.split
}

// take reports whether chunk is the one to split, disarming the proxy.
func (p *splitProxy) take(chunk []byte, fromServer bool) (chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !fromServer || p.marker == nil || !bytes.Contains(chunk, p.marker) {
		return nil, false
	}
	p.marker = nil
	return p.split, true
}

func (p *splitProxy) pipe(src, dst net.Conn, fromServer bool) {
	defer func() { _ = src.Close(); _ = dst.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if done, ok := p.take(chunk, fromServer); ok {
				cut := bytes.LastIndexByte(chunk, '$')
				_, werr := dst.Write(chunk[:cut])
				if werr == nil {
					time.Sleep(splitHold) // the fault: the rest of the reply comes late
					_, werr = dst.Write(chunk[cut:])
				}
				close(done)
				if werr != nil {
					return
				}
			} else if _, werr := dst.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// gapLog records the gaps a Backend reports (WithSubscriberGapHook).
type gapLog struct {
	mu   sync.Mutex
	gaps [][2]time.Time
}

func (g *gapLog) hook(from, to time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gaps = append(g.gaps, [2]time.Time{from, to})
}

func (g *gapLog) all() [][2]time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][2]time.Time(nil), g.gaps...)
}

// covers asserts that one gap reported began at or before from and ended
// at or after to.
func (g *gapLog) covers(t *testing.T, from, to time.Time) {
	t.Helper()
	for _, gap := range g.all() {
		if !gap[0].After(from) && !gap[1].Before(to) {
			return
		}
	}
	t.Errorf("no gap reported from %v or earlier to %v or later; reported: %v", from, to, g.all())
}

// A message whose reply the subscriber's read got only in part before its
// deadline (the rest came 3 s later) is not lost without a trace: the
// rest does not parse as an answer to any ping, so the stream is not
// trusted, the connection is replaced and the observer reads its key
// again, reporting the gap. Read as it came, the rest would have made
// pongs of no ping, and the new holder would never have been observed.
func TestObserveDistrustsAReplyCutByItsReadDeadline(t *testing.T) {
	ctx := ctxFor(t)
	prefix := redistest.Prefix()
	p := newSplitProxy(t)
	var gaps gapLog
	ob := backendVia(ctx, t, p.addr(), prefix, redisb.WithSubscriberGapHook(gaps.hook))
	mb, _, _ := newBackendPrefix(t, prefix)
	l := grant(t, mb, time.Minute)
	states := observe(t, ctx, ob, "cut-observed")
	require.False(t, next(t, states).Held)

	split := p.arm("cut-observed")
	began := time.Now()
	c, err := mb.Acquire(ctx, request("cut-observed", l, "T"))
	require.NoError(t, err)
	assert.Equal(t, heldBy("T", c, ""), holders(next(t, states)))
	select {
	case <-split:
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's message never went through the proxy")
	}
	gaps.covers(t, began, began)
}

// The same for a waiter: the departure it waits for, cut by its
// subscriber's read deadline, makes the connection be replaced, and the
// waiter checks once more and is admitted (its holder's lease runs a
// minute: no timer would wake it before the test's end).
func TestWaiterDistrustsAReplyCutByItsReadDeadline(t *testing.T) {
	ctx := ctxFor(t)
	prefix := redistest.Prefix()
	p := newSplitProxy(t)
	wb := backendVia(ctx, t, p.addr(), prefix)
	hb, _, _ := newBackendPrefix(t, prefix)
	l := grant(t, hb, time.Minute)
	holder, err := hb.Acquire(ctx, request("cut-waited", l, "H"))
	require.NoError(t, err)
	w := startAcquire(t, wb, request("cut-waited", l, "W"))
	awaitWaiting(t, hb, "cut-waited", 1)
	awaitSubscribed(t, "{"+prefix+"}e:"+strconv.FormatUint(holder.Token, 10))

	split := p.arm("cut-waited")
	require.NoError(t, hb.Release(ctx, holder))
	wc := w.await(t)
	require.NoError(t, wb.Release(ctx, wc))
	select {
	case <-split:
	case <-time.After(10 * time.Second):
		t.Fatal("the departure's message never went through the proxy")
	}
}

// A term that begins and ends while the observer's subscriber is cut off
// cannot be observed - Redis keeps no history of it - but it is not
// passed over silently: the gap hook reports a gap that covers it. Here
// the subscriber's connection is lost while its route holds every byte (a
// server restart, then a blackhole of the route, as in a chaos run), so
// it is subscribed again, and the observer reads its key, only once the
// route flows again; and, second, the route holds its bytes for longer
// than the subscriber waits for an answer to its pings, so the Backend
// replaces the connection.
func TestObserveReportsTheGapOfACutOffSubscriber(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(p *redistest.Proxy)
		hold time.Duration
	}{
		{"connection lost", func(p *redistest.Proxy) { p.Reset() }, 2 * time.Second},
		{"connection silent", func(*redistest.Proxy) {}, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			prefix := redistest.Prefix()
			p, err := srv.Proxy()
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			var gaps gapLog
			ob := backendVia(ctx, t, p.Addr(), prefix, redisb.WithSubscriberGapHook(gaps.hook))
			mb, _, _ := newBackendPrefix(t, prefix)
			l := grant(t, mb, time.Minute)
			states := observe(t, ctx, ob, "cutoff")
			require.False(t, next(t, states).Held)

			p.Blackhole()
			tc.cut(p)
			began := time.Now()
			c, err := mb.Acquire(ctx, request("cutoff", l, "T"))
			require.NoError(t, err)
			time.Sleep(tc.hold) // the fault lasts; the term goes on
			require.NoError(t, mb.Release(ctx, c))
			ended := time.Now()
			end, err := mb.Acquire(ctx, request("cutoff", l, "end"))
			require.NoError(t, err)
			p.Restore()
			assert.Equal(t, heldBy("end", end, ""), holders(next(t, states)), "a state of the gap observed, or the state after it missed")
			gaps.covers(t, began, ended)
		})
	}
}

// awaitSubscribed polls PUBSUB NUMSUB until a connection has subscribed
// to channel (nothing announces it).
func awaitSubscribed(t *testing.T, channel string) {
	t.Helper()
	c := client(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := c.PubSubNumSub(ctxFor(t), channel).Result()
		require.NoError(t, err)
		if n[channel] > 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "nobody subscribed to %q", channel)
		time.Sleep(5 * time.Millisecond)
	}
}
