package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// memberTimeout bounds a member's start, restart and stop.
const memberTimeout = 30 * time.Second

// cluster is an embedded etcd cluster whose members can be stopped,
// restarted and cut off from their peers.
//
// It exists beside tests/etcdtest because a member partition needs the
// member's *etcdserver.EtcdServer (CutPeer and MendPeer drop raft traffic
// between two members, in both directions, inside the transport), and
// etcdtest does not hand it out. Partitioning at the raft transport is also
// the only in-process way to isolate a member completely: a TCP proxy in
// front of a peer URL sees connections from every other member alike, and
// raft falls back from streams to pipelines, so blocking one proxy does not
// cut the member off.
//
// Methods are safe for concurrent use.
type cluster struct {
	dir string

	mu      sync.Mutex
	members []*member
	cut     int // partitioned member, -1 if none
}

type member struct {
	name      string
	dir       string
	clientURL url.URL
	peerURL   url.URL
	id        types.ID    // raft ID; fixed by the name and peer URL
	etcd      *embed.Etcd // nil while stopped
}

// startCluster starts n members on loopback and waits until all are ready.
func startCluster(ctx context.Context, n int) (*cluster, error) {
	dir, err := os.MkdirTemp("", "ashlock-chaos-etcd-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, cut: -1}
	var initial []string
	for i := range n {
		cu, err1 := freeURL()
		pu, err2 := freeURL()
		if err := errors.Join(err1, err2); err != nil {
			_ = c.close()
			return nil, err
		}
		name := fmt.Sprintf("m%d", i)
		c.members = append(c.members, &member{name: name, dir: filepath.Join(dir, name), clientURL: cu, peerURL: pu})
		initial = append(initial, name+"="+pu.String())
	}
	for _, m := range c.members {
		e, err := embed.StartEtcd(m.config(strings.Join(initial, ","), embed.ClusterStateFlagNew))
		if err != nil {
			_ = c.close()
			return nil, fmt.Errorf("start %s: %w", m.name, err)
		}
		m.etcd = e
	}
	for _, m := range c.members {
		if err := ready(ctx, m.etcd); err != nil {
			_ = c.close()
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		m.id = m.etcd.Server.MemberID()
	}
	return c, nil
}

func (m *member) config(initial, state string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.InitialCluster = initial
	cfg.InitialClusterToken = "ashlock-chaos"
	cfg.ClusterState = state
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.EnableGRPCGateway = false
	cfg.UnsafeNoFsync = true
	return cfg
}

func ready(ctx context.Context, e *embed.Etcd) error {
	ctx, cancel := context.WithTimeout(ctx, memberTimeout)
	defer cancel()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("failed while starting: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("not ready: %w", ctx.Err())
	}
}

// freeURL returns an http URL on 127.0.0.1 with a port that was free a
// moment ago.
func freeURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return url.URL{}, err
	}
	return url.URL{Scheme: "http", Host: addr}, nil
}

// clientAddrs returns every member's client address (host:port).
func (c *cluster) clientAddrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.clientURL.Host
	}
	return out
}

// leader returns the index of the running member that is leader in its
// own eyes and has the agreement of another running member, or -1.
func (c *cluster) leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.etcd == nil || m.etcd.Server.Leader() != m.id {
			continue
		}
		for j, o := range c.members {
			if j != i && o.etcd != nil && o.etcd.Server.Leader() == m.id {
				return i
			}
		}
	}
	return -1
}

// stop stops member i, keeping its data. Stopping a stopped member does
// nothing.
func (c *cluster) stop(i int) error {
	c.mu.Lock()
	m := c.members[i]
	e := m.etcd
	m.etcd = nil
	c.mu.Unlock()
	if e == nil {
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Close()
	}()
	select {
	case <-done:
		return nil
	case <-time.After(memberTimeout):
		return fmt.Errorf("member %s did not stop within %v", m.name, memberTimeout)
	}
}

// restart starts stopped member i again on its ports and data and waits
// until it is ready.
func (c *cluster) restart(ctx context.Context, i int) error {
	c.mu.Lock()
	m := c.members[i]
	if m.etcd != nil {
		c.mu.Unlock()
		return nil
	}
	var initial []string
	for _, o := range c.members {
		initial = append(initial, o.name+"="+o.peerURL.String())
	}
	e, err := embed.StartEtcd(m.config(strings.Join(initial, ","), embed.ClusterStateFlagExisting))
	if err != nil {
		c.mu.Unlock()
		return fmt.Errorf("restart %s: %w", m.name, err)
	}
	m.etcd = e
	c.mu.Unlock()
	return ready(ctx, e)
}

// partition cuts member i off from every other member: raft messages
// between them are dropped both ways until heal. Only one member is cut
// at a time; the member must be running.
func (c *cluster) partition(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut >= 0 {
		return fmt.Errorf("member %d is already partitioned", c.cut)
	}
	m := c.members[i]
	if m.etcd == nil {
		return fmt.Errorf("member %s is stopped", m.name)
	}
	for j, o := range c.members {
		if j == i || o.etcd == nil {
			continue
		}
		m.etcd.Server.CutPeer(o.id)
		o.etcd.Server.CutPeer(m.id)
	}
	c.cut = i
	return nil
}

// heal undoes partition. It does nothing when no member is cut.
func (c *cluster) heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut < 0 {
		return
	}
	m := c.members[c.cut]
	for j, o := range c.members {
		if j == c.cut {
			continue
		}
		if m.etcd != nil {
			m.etcd.Server.MendPeer(o.id)
		}
		if o.etcd != nil {
			o.etcd.Server.MendPeer(m.id)
		}
	}
	c.cut = -1
}

// close stops every member and removes the data directory.
func (c *cluster) close() error {
	c.mu.Lock()
	n := len(c.members)
	c.mu.Unlock()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.stop(i)
		}()
	}
	wg.Wait()
	return errors.Join(errors.Join(errs...), os.RemoveAll(c.dir))
}
