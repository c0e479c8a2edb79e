package etcdtest

import (
	"context"
	"fmt"
	"reflect"
)

// Leader returns the index of the running member that is leader in its own
// eyes and in the eyes of at least one other running member, or -1 while
// there is none (an election is in progress, or a single-member cluster is
// stopped). For a single member, it is that member when running.
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.etcd == nil || m.etcd.Server.Leader() != m.id {
			continue
		}
		if len(c.members) == 1 {
			return i
		}
		for j, o := range c.members {
			if j != i && o.etcd != nil && o.etcd.Server.Leader() == m.id {
				return i
			}
		}
	}
	return -1
}

// AwaitLeader waits until Leader returns a member for which ok holds, and
// returns it, or returns an error once ctx ends. It checks again each time
// a running member learns of a new leader (etcd's leader-change
// notification), rather than polling. A member started during the wait is
// heard from only once another change has woken it.
func (c *Cluster) AwaitLeader(ctx context.Context, ok func(int) bool) (int, error) {
	for {
		// Taken before the check, so that no change after it is missed.
		changed := c.leaderChanges()
		i := c.Leader()
		if i >= 0 && ok(i) {
			return i, nil
		}
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}}
		for _, ch := range changed {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
		}
		if chosen, _, _ := reflect.Select(cases); chosen == 0 {
			return -1, fmt.Errorf("etcdtest: leader %d does not qualify: %w", i, ctx.Err())
		}
	}
}

// leaderChanges returns, per running member, a channel closed when it next
// learns of a new leader.
func (c *Cluster) leaderChanges() []<-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []<-chan struct{}
	for _, m := range c.members {
		if m.etcd != nil {
			out = append(out, m.etcd.Server.LeaderChangedNotify())
		}
	}
	return out
}

// Partition cuts running member i off from every other running member:
// raft messages between them are dropped in both directions, inside each
// member's transport, until Heal. Its clients stay connected to it, which
// is what makes a partition different from a stop: they talk to a member
// that cannot reach a quorum.
//
// It cuts at the raft transport because that is the only in-process way to
// isolate a member completely: a TCP proxy in front of a peer URL sees the
// connections of all other members alike, and raft falls back from streams
// to pipelines, so blocking one proxy does not cut the member off. Only one
// member is cut at a time.
func (c *Cluster) Partition(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut != nil {
		return fmt.Errorf("etcdtest: member %s is already partitioned", c.cut.name)
	}
	m := c.members[i]
	if m.etcd == nil {
		return fmt.Errorf("etcdtest: member %s is stopped", m.name)
	}
	for _, o := range c.members {
		if o == m || o.etcd == nil {
			continue
		}
		m.etcd.Server.CutPeer(o.id)
		o.etcd.Server.CutPeer(m.id)
	}
	c.cut = m
	return nil
}

// Heal undoes Partition. It does nothing when no member is cut.
func (c *Cluster) Heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.cut
	if m == nil {
		return
	}
	for _, o := range c.members {
		if o == m {
			continue
		}
		// Each side is mended on its own: a member restarted since the cut
		// has a fresh transport, but the other side's still drops its
		// messages. A stopped member gets a fresh transport when it
		// restarts, so there is nothing to mend on its side.
		if m.etcd != nil {
			m.etcd.Server.MendPeer(o.id)
		}
		if o.etcd != nil {
			o.etcd.Server.MendPeer(m.id)
		}
	}
	c.cut = nil
}
