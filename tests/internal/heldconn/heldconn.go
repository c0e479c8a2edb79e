// Package heldconn wraps network connections so that, from a write that
// matches, what the client writes is held back and delivered later, as a
// network delivers late what it held up: a request that reaches the
// server only after the client gave up on it.
package heldconn

import (
	"bytes"
	"context"
	"net"
	"sync"
	"time"
)

// Writes holds, on each connection it wraps, what the client writes from
// the first write that hold matches (before Finish) until Finish, then
// sends it. A connection the client closes meanwhile closes once its
// writes are sent, as TCP delivers what was sent before a close.
// Confirmed gets a value when a holding connection reads something that
// confirm matches (nil: never); Sent gets the local address of the first
// connection whose held writes went out. Safe for concurrent use.
type Writes struct {
	Confirmed chan struct{}
	Sent      chan string

	hold, confirm func([]byte) bool
	open          chan struct{}
	once          sync.Once
	wg            sync.WaitGroup
}

// New returns Writes that hold from a write hold matches, and report a
// read confirm matches (confirm may be nil).
func New(hold, confirm func([]byte) bool) *Writes {
	return &Writes{hold: hold, confirm: confirm, open: make(chan struct{}),
		Confirmed: make(chan struct{}, 1), Sent: make(chan string, 1)}
}

// Finish sends what every connection holds, and returns once it is sent.
// Later writes are not held.
func (h *Writes) Finish() {
	h.once.Do(func() { close(h.open) })
	h.wg.Wait()
}

// Wrap returns c with its writes held as h says.
func (h *Writes) Wrap(c net.Conn) net.Conn { return &conn{Conn: c, h: h} }

// Dial dials as a net.Dialer does and wraps the connection.
func (h *Writes) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return h.Wrap(c), nil
}

type conn struct {
	net.Conn
	h       *Writes
	mu      sync.Mutex
	holding bool
	closed  bool
	held    [][]byte
}

func (c *conn) Write(b []byte) (int, error) {
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

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	holding := c.holding
	c.mu.Unlock()
	if holding && c.h.confirm != nil && c.h.confirm(b[:n]) {
		select {
		case c.h.Confirmed <- struct{}{}:
		default:
		}
	}
	return n, err
}

// Close closes at once unless writes are held: then after them.
func (c *conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		c.closed = true
		return nil
	}
	return c.Conn.Close()
}

// release writes what was held once Finish is called.
func (c *conn) release() {
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
	case c.h.Sent <- c.Conn.LocalAddr().String():
	default:
	}
	if c.closed {
		_ = c.Conn.Close()
	}
}
