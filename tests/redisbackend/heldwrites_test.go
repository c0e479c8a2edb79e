package redisbackend

import (
	"bytes"
	"context"
	"net"
	"sync"
	"time"
)

// heldWrites is a dialer whose connections, from the first write that
// hold matches (before finish), keep what the client writes until finish,
// then send it, as a network would deliver it late. A connection the
// client closes meanwhile closes once its writes are sent, as TCP delivers
// what was sent before a close. confirmed gets a value when a holding
// connection reads a subscription's confirmation; sent gets the local
// address of the first connection whose held writes went out.
type heldWrites struct {
	hold      func(b []byte) bool
	open      chan struct{}
	once      sync.Once
	wg        sync.WaitGroup
	confirmed chan struct{}
	sent      chan string
}

func newHeldWrites(hold func(b []byte) bool) *heldWrites {
	return &heldWrites{hold: hold, open: make(chan struct{}), confirmed: make(chan struct{}, 1), sent: make(chan string, 1)}
}

// finish sends what every connection holds, and returns once it is sent.
func (h *heldWrites) finish() {
	h.once.Do(func() { close(h.open) })
	h.wg.Wait()
}

func (h *heldWrites) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &heldConn{Conn: c, h: h}, nil
}

type heldConn struct {
	net.Conn
	h       *heldWrites
	mu      sync.Mutex
	holding bool
	closed  bool
	held    [][]byte
}

func (c *heldConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.holding && c.h.hold(b) {
		select {
		case <-c.h.open:
		default:
			c.holding = true
			c.h.wg.Add(1)
			go c.release()
		}
	}
	if c.holding {
		c.held = append(c.held, bytes.Clone(b))
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *heldConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	holding := c.holding
	c.mu.Unlock()
	if holding && bytes.Contains(b[:n], []byte("subscribe")) {
		select {
		case c.h.confirmed <- struct{}{}:
		default:
		}
	}
	return n, err
}

// Close closes at once unless writes are held: then after them.
func (c *heldConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		c.closed = true
		return nil
	}
	return c.Conn.Close()
}

// release writes what was held once finish is called.
func (c *heldConn) release() {
	defer c.h.wg.Done()
	<-c.h.open
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
	select {
	case c.h.sent <- c.Conn.LocalAddr().String():
	default:
	}
	if c.closed {
		_ = c.Conn.Close()
	}
}
