package etcdtest

import (
	"context"
	"testing"
	"time"
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
