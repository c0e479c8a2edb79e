package pgtest

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections from a loopback port to the server, and
// can cut them off without closing them: Blackhole drops every byte in
// both directions, Drop does so for good on the connections open now, and
// Hold stops forwarding until released, so that clients behind it see a
// server that went silent (a partition), not one that went away. Its
// methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	holed  atomic.Bool

	holdMu  sync.Mutex
	resumed chan struct{} // nil unless held; closed when the hold ends
	quit    chan struct{} // closed by Close

	mu    sync.Mutex
	conns map[net.Conn]*atomic.Bool // both ends of each link, to its Drop flag
	wg    sync.WaitGroup
}

// NewProxy starts a proxy in front of the server's port. Close it.
func (s *Server) NewProxy() (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), conns: make(map[net.Conn]*atomic.Bool), quit: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Port returns the proxy's port on 127.0.0.1.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// DSN is Server.DSN through the proxy.
func (p *Proxy) DSN(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", p.Port(), Superuser, db)
}

// Blackhole starts (on) or stops dropping every byte through the proxy.
// Bytes dropped are lost for good, as in a network that loses packets
// until the connection gives up.
func (p *Proxy) Blackhole(on bool) { p.holed.Store(on) }

// Drop makes every connection open through the proxy now lose every byte
// from now on, in both directions, while both of its sockets stay open:
// neither end is ever told, as when a NAT or firewall forgets a connection
// or a failover moves the server's address. Connections opened later are
// forwarded as usual.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, dropped := range p.conns {
		dropped.Store(true)
	}
}

// Hold starts (on) or ends holding every byte through the proxy: nothing
// is forwarded, in either direction, and what was sent meanwhile is
// delivered once the hold ends, as TCP retransmits it after a partition
// heals. Connections opened meanwhile wait too. Unlike Blackhole, no
// connection is left with a gap in its stream.
func (p *Proxy) Hold(on bool) {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	switch {
	case on && p.resumed == nil:
		p.resumed = make(chan struct{})
	case !on && p.resumed != nil:
		close(p.resumed)
		p.resumed = nil
	}
}

// awaitRelease blocks while the proxy is held, until the hold ends or the
// proxy closes.
func (p *Proxy) awaitRelease() {
	p.holdMu.Lock()
	resumed := p.resumed
	p.holdMu.Unlock()
	if resumed == nil {
		return
	}
	select {
	case <-resumed:
	case <-p.quit:
	}
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.forward(in)
	}
}

func (p *Proxy) forward(in net.Conn) {
	defer p.wg.Done()
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	if p.conns == nil { // closed
		p.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	dropped := new(atomic.Bool)
	p.conns[in], p.conns[out] = dropped, dropped
	p.mu.Unlock()
	var both sync.WaitGroup
	both.Go(func() { p.pipe(out, in, dropped) })
	both.Go(func() { p.pipe(in, out, dropped) })
	both.Wait()
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}

// pipe copies src to dst, dropping what it reads while blackholed or once
// dropped; either end failing closes both.
func (p *Proxy) pipe(dst, src net.Conn, dropped *atomic.Bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			// Reading stops too while held, so the sender's TCP
			// window fills up as in a real partition.
			p.awaitRelease()
		}
		if n > 0 && !p.holed.Load() && !dropped.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Sever closes every connection through the proxy, as a network that
// resets them; new ones are forwarded as before.
func (p *Proxy) Sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy and closes every connection through it, then waits
// for its goroutines. It is safe to call more than once.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.holdMu.Lock()
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	p.holdMu.Unlock()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
	return err
}
