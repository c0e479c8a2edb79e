package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// slots is how many hash slots a Redis Cluster has.
const slots = 16384

// Cluster is a Redis Cluster of masters without replicas, each a Server as
// Start makes it (temp dir, loopback port, keyspace notifications on,
// appendfsync always) with cluster mode on, the slots split evenly.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts n masters, joins them, gives each an even share of
// the slots, and waits until every node reports the cluster ok, or ctx
// ends. On failure nothing is left running.
func StartCluster(ctx context.Context, n int) (*Cluster, error) {
	c := &Cluster{}
	if err := c.start(ctx, n); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, n int) error {
	for range n {
		s, err := start(ctx, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		if err != nil {
			return err
		}
		c.Nodes = append(c.Nodes, s)
	}
	first := c.Nodes[0].Client()
	defer first.Close()
	for i, s := range c.Nodes {
		nc := s.Client()
		lo, hi := i*slots/n, (i+1)*slots/n-1
		err := nc.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
		nc.Close()
		if err != nil {
			return fmt.Errorf("redistest: cluster: slots %d-%d to %s: %w", lo, hi, s.addr, err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(s.addr)
			if err := first.Do(ctx, "CLUSTER", "MEET", host, port).Err(); err != nil {
				return fmt.Errorf("redistest: cluster: meet %s: %w", s.addr, err)
			}
		}
	}
	return c.awaitOK(ctx)
}

// awaitOK waits until every node says cluster_state:ok and knows every
// node, or ctx ends.
func (c *Cluster) awaitOK(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.ok(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster not ready: %w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func (c *Cluster) ok(ctx context.Context) error {
	for _, s := range c.Nodes {
		nc := s.Client()
		info, err := nc.ClusterInfo(ctx).Result()
		nc.Close()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Nodes))+"\r") {
			return errors.New(s.addr + ": " + strings.ReplaceAll(info, "\r\n", " "))
		}
	}
	return nil
}

// Client returns a new cluster client of all the nodes; the caller closes
// it.
func (c *Cluster) Client() *goredis.ClusterClient {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.addr
	}
	return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
}

// Close stops every node and removes their directories.
func (c *Cluster) Close() error {
	var errs []error
	for _, s := range c.Nodes {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
