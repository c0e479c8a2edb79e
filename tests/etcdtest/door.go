package etcdtest

import (
	"io"
	"net"
	"sync"
	"time"
)

// door is a TCP forwarder in front of a member's client port. Clients
// connect to the door; the door connects them on to the member.
//
// It exists so that stopping a member is quick: embed.Etcd.Close waits, up
// to etcd's request timeout (7s with the default timing), for clients'
// open streams such as watches to end, and clients keep them open. Before
// a member stops, its door drops every connection and refuses new ones
// until the member is back, which to a client looks like a crashed server.
type door struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	closed bool // refuse connections: member stopped
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// openDoor listens on addr and forwards to target.
func openDoor(addr, target string) (*door, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	d := &door{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	d.wg.Add(1)
	go d.serve()
	return d, nil
}

func (d *door) serve() {
	defer d.wg.Done()
	for {
		in, err := d.ln.Accept()
		if err != nil {
			return // listener closed by shut
		}
		d.wg.Add(1)
		go d.forward(in)
	}
}

func (d *door) forward(in net.Conn) {
	defer d.wg.Done()
	d.mu.Lock()
	refuse := d.closed
	d.mu.Unlock()
	if refuse {
		in.Close()
		return
	}
	out, err := net.DialTimeout("tcp", d.target, time.Second)
	if err != nil {
		in.Close()
		return
	}
	if !d.track(in, out) {
		in.Close()
		out.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Either direction ending ends the connection, both ways.
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
	d.mu.Lock()
	delete(d.conns, in)
	delete(d.conns, out)
	d.mu.Unlock()
}

// track registers a connection pair unless the door closed meanwhile.
func (d *door) track(in, out net.Conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.conns[in] = struct{}{}
	d.conns[out] = struct{}{}
	return true
}

// close drops every connection and refuses new ones until open is called.
func (d *door) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for c := range d.conns {
		c.Close()
	}
}

// open lets connections through again.
func (d *door) open() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = false
}

// shut closes the door for good and waits for its goroutines.
func (d *door) shut() {
	d.close()
	d.ln.Close()
	d.wg.Wait()
}
