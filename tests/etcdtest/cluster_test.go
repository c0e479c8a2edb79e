package etcdtest

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// A value written before a member's restart is there after it, and the
// revision counter carries on: what ashlock's fencing tokens rely on.
func TestRestartKeepsData(t *testing.T) {
	c := Start(t)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	put, err := cli.Put(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	c.StopMember(0)
	c.RestartMemberT(t, 0)
	got, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" || got.Header.Revision < put.Header.Revision {
		t.Fatalf("after restart: %v at revision %d, want v at >= %d", got.Kvs, got.Header.Revision, put.Header.Revision)
	}
}

func TestThreeMembers(t *testing.T) {
	c := StartCluster(t, 3)
	if n := len(c.Endpoints()); n != 3 {
		t.Fatalf("%d endpoints, want 3", n)
	}
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.StopMember(2) // a quorum of two remains
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put with one member down: %v", err)
	}
	c.RestartMemberT(t, 2)
	m, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Members) != 3 {
		t.Fatalf("%d members after restart, want 3", len(m.Members))
	}
}

// A partitioned member cannot commit, the others carry on without it, and
// it catches up once healed.
func TestPartitionAndHeal(t *testing.T) {
	c := StartCluster(t, 3)
	cut := c.Leader()
	if cut < 0 {
		t.Fatal("no leader in a ready cluster")
	}
	if err := c.Partition(cut); err != nil {
		t.Fatal(err)
	}
	if err := c.Partition((cut + 1) % 3); err == nil {
		t.Error("a second Partition while one member is cut: nil error, want one")
	}
	var rest []string
	for i, ep := range c.Endpoints() {
		if i != cut {
			rest = append(rest, ep)
		}
	}
	only := func(eps ...string) func(*clientv3.Config) {
		return func(cfg *clientv3.Config) { cfg.Endpoints = eps }
	}
	isolated := c.Client(t, only(c.Endpoints()[cut]))
	majority := c.Client(t, only(rest...))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := isolated.Put(clientv3.WithRequireLeader(ctx), "k", "isolated")
	cancel()
	if err == nil {
		t.Fatal("a put through the partitioned member committed")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := majority.Put(ctx, "k", "majority"); err != nil {
		t.Fatalf("put through the majority: %v", err)
	}
	if l := c.Leader(); l == cut {
		t.Errorf("the partitioned member %d is still the agreed leader", cut)
	}

	c.Heal()
	got, err := isolated.Get(ctx, "k") // linearizable: needs the member back in the cluster
	if err != nil {
		t.Fatalf("get through the healed member: %v", err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "majority" {
		t.Fatalf("healed member reads %v, want k=majority", got.Kvs)
	}
}

// A member that fails to start - in real runs, a port another process took
// - makes Launch stop the members already started, which never became
// ready, and start the cluster again, instead of failing or hanging.
func TestLaunchRetriesAFailedStart(t *testing.T) {
	failed := false
	startEtcd = func(cfg *embed.Config) (*embed.Etcd, error) {
		if cfg.Name == memberName(1) && !failed {
			failed = true
			return nil, errors.New("test: listen tcp: address already in use")
		}
		return embed.StartEtcd(cfg)
	}
	t.Cleanup(func() { startEtcd = embed.StartEtcd })

	type launched struct {
		c   *Cluster
		err error
	}
	done := make(chan launched, 1)
	dir := t.TempDir()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
		defer cancel()
		c, err := Launch(ctx, Options{Members: 3, Dir: dir})
		done <- launched{c, err}
	}()
	var c *Cluster
	select {
	case l := <-done:
		if l.err != nil {
			t.Fatalf("Launch: %v", l.err)
		}
		c = l.c
		t.Cleanup(func() { c.Close() })
	case <-time.After(2 * StartTimeout):
		t.Fatal("Launch did not return after a member failed to start")
	}
	if !failed {
		t.Fatal("the injected start failure did not happen")
	}
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put on the cluster started again: %v", err)
	}
}
