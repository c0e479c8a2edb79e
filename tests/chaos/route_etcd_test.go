package chaos

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"
)

// proxyCloseTimeout bounds closing one route.
const proxyCloseTimeout = 15 * time.Second

// etcdRoute is one lock holder's way to the cluster: a proxy per member, so
// that faults can be put between this holder and etcd without touching
// anyone else. The proxies listen on unix sockets: loopback only, and
// unlike a TCP proxy of go.etcd.io/etcd/pkg/v3/proxy (which listens on
// every interface) nothing outside the machine can reach them.
//
// Methods are safe for concurrent use.
type etcdRoute struct {
	name    string
	sockets []string
	proxies []proxy.Server
	drained sync.WaitGroup

	mu          sync.Mutex
	blackholed  bool
	delayed     time.Duration
	closeResult error
	closed      bool
}

// newEtcdRoute starts one proxy per member address in dir, named after name.
func newEtcdRoute(dir, name string, members []string) (*etcdRoute, error) {
	r := &etcdRoute{name: name}
	for i, addr := range members {
		sock := filepath.Join(dir, fmt.Sprintf("%s-m%d.sock", name, i))
		p := proxy.NewServer(proxy.ServerConfig{
			Logger:        zap.NewNop(),
			From:          url.URL{Scheme: "unix", Host: sock},
			To:            url.URL{Scheme: "tcp", Host: addr},
			DialTimeout:   time.Second,
			RetryInterval: 50 * time.Millisecond,
		})
		r.proxies = append(r.proxies, p)
		r.sockets = append(r.sockets, sock)
		// The proxy reports every failed dial and broken connection on a
		// channel with room for 16; once it is full, the accept loop blocks
		// until someone reads. A member restart produces far more than 16,
		// so the errors are drained here (they are expected under faults).
		r.drained.Add(1)
		go func() {
			defer r.drained.Done()
			for {
				select {
				case <-p.Error():
				case <-p.Done():
					return
				}
			}
		}()
		select {
		case <-p.Ready():
		case <-p.Done():
			_ = r.close()
			return nil, fmt.Errorf("proxy %s to %s did not start", sock, addr)
		case <-time.After(memberTimeout):
			_ = r.close()
			return nil, fmt.Errorf("proxy %s to %s not ready within %v", sock, addr, memberTimeout)
		}
	}
	return r, nil
}

// endpoint returns the etcd client endpoints of the route.
func (r *etcdRoute) endpoint() endpoint {
	out := make([]string, len(r.sockets))
	for i, s := range r.sockets {
		out[i] = "unix://" + s
	}
	return endpoint{Store: storeEtcd, Endpoints: out}
}

// blackhole stops all traffic between the holder and etcd, both ways, on
// connections open now and opened later: nothing gets through until heal.
// What was sent meanwhile is held and delivered after heal, as TCP would
// retransmit it once a partition ends - so requests the client has long
// given up on reach etcd late, which is part of the test.
//
// The proxy's BlackholeTx/Rx, which drop bytes from a live TCP stream,
// are not used: no real network does that, it garbles HTTP/2 framing, and
// the client then sits on a dead connection until gRPC keep-alive gives up
// on it (10s at the least), which says nothing about the lock.
func (r *etcdRoute) blackhole() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.proxies {
		p.PauseTx()
		p.PauseRx()
	}
	r.blackholed = true
}

// delay holds every chunk of data d (plus or minus a tenth) each way.
func (r *etcdRoute) delay(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.proxies {
		p.DelayTx(d, d/10)
		p.DelayRx(d, d/10)
	}
	r.delayed = d
}

// heal removes blackhole and delay.
func (r *etcdRoute) heal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.blackholed {
		for _, p := range r.proxies {
			p.UnpauseTx()
			p.UnpauseRx()
		}
		r.blackholed = false
	}
	if r.delayed > 0 {
		for _, p := range r.proxies {
			p.UndelayTx()
			p.UndelayRx()
		}
		r.delayed = 0
	}
}

// close stops the proxies. Call it after the clients using the route are
// closed: a proxy waits for its open connections to end. It is idempotent.
func (r *etcdRoute) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return r.closeResult
	}
	r.closed = true
	done := make(chan error, 1)
	go func() {
		var errs []error
		for _, p := range r.proxies {
			if err := p.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		r.drained.Wait()
		done <- errors.Join(errs...)
	}()
	select {
	case err := <-done:
		r.closeResult = err
	case <-time.After(proxyCloseTimeout):
		r.closeResult = fmt.Errorf("route %s: proxies did not close within %v", r.name, proxyCloseTimeout)
	}
	return r.closeResult
}
