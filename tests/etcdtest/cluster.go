package etcdtest

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
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Options configures Launch. The zero value asks for one member with its
// data in a fresh temporary directory on free ports.
type Options struct {
	// Members is the number of members; 0 means 1.
	Members int
	// Dir holds the members' data directories. Empty means a fresh
	// temporary directory that Close removes; a directory given here is
	// left in place.
	Dir string
	// ClientAddrs, if set, fixes the client address (host:port) of each
	// member, in order; port 0 picks a free port. Members beyond the list
	// get free ports on 127.0.0.1.
	ClientAddrs []string
}

// Cluster is a set of embedded etcd members in this process. Its methods
// are safe for concurrent use.
type Cluster struct {
	dir    string
	ownDir bool

	mu      sync.Mutex
	members []*member
	cut     *member // partitioned member, nil if none; see Partition
}

type member struct {
	name      string
	dir       string
	clientURL url.URL // the door, which clients use
	innerURL  url.URL // where the member itself listens
	peerURL   url.URL
	door      *door
	etcd      *embed.Etcd // nil while stopped
	id        types.ID    // raft member ID, fixed by name and peer URL; set once ready
}

// Launch starts a cluster and waits until every member is ready to serve
// (a leader is elected) or ctx ends. On failure everything it started is
// stopped again.
//
// A member can fail to start because another process took one of the free
// ports picked for it (see loopbackURL): tests of several packages run at
// once. Launch then starts the whole cluster again on other ports, up to
// launchAttempts times.
func Launch(ctx context.Context, opts Options) (*Cluster, error) {
	for attempt := 1; ; attempt++ {
		c, err := launch(ctx, opts)
		var se *startError
		if err == nil || !errors.As(err, &se) || attempt == launchAttempts || ctx.Err() != nil {
			return c, err
		}
		if opts.Dir != "" {
			// The members that did start wrote data for a cluster that
			// never formed; the next attempt starts from nothing.
			for i := range max(opts.Members, 1) {
				if err := os.RemoveAll(filepath.Join(opts.Dir, memberName(i))); err != nil {
					return nil, err
				}
			}
		}
	}
}

// launchAttempts bounds how often Launch starts a cluster whose member
// failed to start.
const launchAttempts = 3

// startError is a member's failure to start (typically a port taken by
// another process), after which Launch tries again.
type startError struct{ err error }

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

func memberName(i int) string { return fmt.Sprintf("m%d", i) }

// startEtcd starts a member; tests replace it to make a start fail.
var startEtcd = embed.StartEtcd

// launch is one attempt of Launch.
func launch(ctx context.Context, opts Options) (*Cluster, error) {
	n := max(opts.Members, 1)
	c := &Cluster{dir: opts.Dir}
	if c.dir == "" {
		d, err := os.MkdirTemp("", "ashlock-etcd-")
		if err != nil {
			return nil, err
		}
		c.dir, c.ownDir = d, true
	}
	var initial []string
	for i := range n {
		clientAddr := ""
		if i < len(opts.ClientAddrs) {
			clientAddr = opts.ClientAddrs[i]
		}
		cu, err := loopbackURL(clientAddr)
		if err != nil {
			c.Close()
			return nil, err
		}
		iu, err := loopbackURL("")
		if err != nil {
			c.Close()
			return nil, err
		}
		pu, err := loopbackURL("")
		if err != nil {
			c.Close()
			return nil, err
		}
		d, err := openDoor(cu.Host, iu.Host)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("etcdtest: listen on %s: %w", cu.Host, err)
		}
		name := memberName(i)
		c.members = append(c.members, &member{
			name: name, dir: filepath.Join(c.dir, name),
			clientURL: cu, innerURL: iu, peerURL: pu, door: d,
		})
		initial = append(initial, name+"="+pu.String())
	}
	cluster := strings.Join(initial, ",")
	for _, m := range c.members {
		e, err := startEtcd(m.config(cluster))
		if err != nil {
			c.Close()
			return nil, &startError{fmt.Errorf("etcdtest: start %s: %w", m.name, err)}
		}
		m.etcd = e
	}
	for _, m := range c.members {
		if err := waitReady(ctx, m.etcd); err != nil {
			c.Close()
			return nil, fmt.Errorf("etcdtest: %s: %w", m.name, err)
		}
		m.id = m.etcd.Server.MemberID()
	}
	return c, nil
}

func (m *member) config(initialCluster string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.innerURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.InitialCluster = initialCluster
	cfg.InitialClusterToken = "ashlock-test"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.EnableGRPCGateway = false
	cfg.UnsafeNoFsync = true
	// The cheapest password hashing bcrypt allows: tests with
	// authentication create users and log in often.
	cfg.BcryptCost = 4
	return cfg
}

// waitReady waits for the member to join a cluster with a leader.
func waitReady(ctx context.Context, e *embed.Etcd) error {
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("failed while starting: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("not ready: %w", ctx.Err())
	}
}

// loopbackURL returns http://addr. An empty addr means 127.0.0.1 on a
// free port, and so does port 0 on the given host. A free port is found by
// listening on port 0 and closing the listener again; another process
// could take it in between, which Launch reports as a start failure.
func loopbackURL(addr string) (url.URL, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return url.URL{}, fmt.Errorf("etcdtest: address %q: %w", addr, err)
	}
	if port == "0" {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return url.URL{}, fmt.Errorf("etcdtest: find a free port: %w", err)
		}
		addr = l.Addr().String()
		if err := l.Close(); err != nil {
			return url.URL{}, err
		}
	}
	return url.URL{Scheme: "http", Host: addr}, nil
}

// Endpoints returns the client address (host:port) of every member,
// stopped ones included, in member order.
func (c *Cluster) Endpoints() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.clientURL.Host
	}
	return out
}

// Size returns the number of members.
func (c *Cluster) Size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.members)
}

// NewClient returns a client of all members with a no-op logger and a 5s
// dial timeout. Each non-nil configure function may change the config
// first (credentials, endpoints, dial options). The caller closes the
// client.
func (c *Cluster) NewClient(configure ...func(*clientv3.Config)) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	for _, f := range configure {
		if f != nil {
			f(&cfg)
		}
	}
	return clientv3.New(cfg)
}

// StopMember stops member i. To its clients it looks like a crash: their
// connections drop at once and new ones are refused. Inside the cluster
// it is a clean shutdown: a leader hands leadership to another member
// first, so the others serve on without an election timeout. Its data
// directory is kept. Stopping a stopped member does nothing.
func (c *Cluster) StopMember(i int) {
	c.mu.Lock()
	m := c.members[i]
	e := m.etcd
	m.etcd = nil
	c.mu.Unlock()
	if e != nil {
		m.door.close()
		select {
		case <-e.Server.ReadyNotify():
		default:
			// Never ready: its cluster did not form (Launch is giving up
			// after another member failed to start). embed's Close waits
			// for the member's client servers, which start only once it
			// is ready or stopping, so stop the server first or Close
			// would wait for ever.
			e.Server.HardStop()
		}
		e.Close()
	}
}

// RestartMember starts stopped member i again on the same ports with its
// existing data, and waits until it is ready or ctx ends. Restarting a
// running member does nothing.
func (c *Cluster) RestartMember(ctx context.Context, i int) error {
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
	cfg := m.config(strings.Join(initial, ","))
	cfg.ClusterState = embed.ClusterStateFlagExisting
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		c.mu.Unlock()
		return fmt.Errorf("etcdtest: restart %s: %w", m.name, err)
	}
	m.etcd = e
	m.door.open()
	c.mu.Unlock()
	if err := waitReady(ctx, e); err != nil {
		return fmt.Errorf("etcdtest: restart %s: %w", m.name, err)
	}
	return nil
}

// Close stops every member and removes the data directory if Launch
// created it. It is safe to call more than once.
//
// Members stop one at a time, the leader last: a leader stopping while
// other members are still up hands its leadership over, which takes
// etcd's request timeout (7s) if they are going down at the same time.
func (c *Cluster) Close() error {
	c.mu.Lock()
	var order []int
	leader := -1
	for i, m := range c.members {
		if m.etcd != nil && m.etcd.Server.Leader() == m.etcd.Server.MemberID() {
			leader = i
			continue
		}
		order = append(order, i)
	}
	if leader >= 0 {
		order = append(order, leader)
	}
	members := c.members
	c.mu.Unlock()
	for _, i := range order {
		c.StopMember(i)
	}
	for _, m := range members {
		m.door.shut()
	}
	if c.ownDir {
		return os.RemoveAll(c.dir)
	}
	return nil
}
