package redistest

import (
	"net"
	"sync"
	"time"
)

// Proxy is a TCP forwarder in front of the server, for cutting one
// client's connections off while others go on. Its methods are safe for
// concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	blocked bool          // blackhole: hold bytes, answer nothing
	wake    chan struct{} // closed when a blackhole ends
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// Proxy starts a forwarder to the server on a free loopback port. Close
// it when done.
func (s *Server) Proxy() (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: s.addr, conns: map[net.Conn]struct{}{}, wake: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is where clients connect to go through the proxy.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole makes every connection through the proxy, and every new one,
// silent: bytes sent either way are held, not delivered, as on a network
// that drops packets. Connections stay open.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = true
}

// Restore ends a blackhole: held bytes flow again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked {
		p.blocked = false
		close(p.wake)
		p.wake = make(chan struct{})
	}
}

// Reset closes every connection through the proxy at once, dropping the
// bytes a blackhole holds, as a crashed middlebox would. New connections
// are served as before (silent, while a blackhole lasts).
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
	// Pipes holding bytes look again, find their connection gone and end.
	if p.blocked {
		close(p.wake)
		p.wake = make(chan struct{})
	}
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	err := p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	if p.blocked {
		p.blocked = false
		close(p.wake)
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			return
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// pipe copies src to dst, holding each chunk while the proxy is a
// blackhole.
func (p *Proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	defer func() {
		_ = src.Close()
		_ = dst.Close()
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.await(src) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // io.EOF or a closed connection: close both ends
		}
	}
}

// await blocks while the proxy is a blackhole; false once it is closed or
// src was reset.
func (p *Proxy) await(src net.Conn) bool {
	for {
		p.mu.Lock()
		blocked, wake, closed := p.blocked, p.wake, p.closed
		_, live := p.conns[src]
		p.mu.Unlock()
		if closed || !live {
			return false
		}
		if !blocked {
			return true
		}
		<-wake
	}
}
