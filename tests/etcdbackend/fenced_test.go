package etcdbackend_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// IsOwner gives a comparison that lets a write to etcd commit only while
// the claim holds the key: not after its release, not for the claim a
// later holder superseded it with.
func TestIsOwnerFencesWrites(t *testing.T) {
	prefix := uniquePrefix(t)
	b, cli := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	data := prefix + "data" // state the lock protects, kept in etcd
	write := func(cmp clientv3.Cmp, v string) bool {
		t.Helper()
		resp, err := cli.Txn(testCtx(t, waitBound)).If(cmp).Then(clientv3.OpPut(data, v)).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}

	first := acquire(t, b, request("k", l, "first"))
	if !write(b.IsOwner(first), "1") {
		t.Fatal("write by the holder was refused")
	}
	if err := b.Release(testCtx(t, waitBound), first); err != nil {
		t.Fatal(err)
	}
	if write(b.IsOwner(first), "stale") {
		t.Fatal("write after Release committed")
	}
	second := acquire(t, b, request("k", l, "second"))
	if write(b.IsOwner(first), "stale") {
		t.Fatal("write by the superseded holder committed while another held the key")
	}
	if !write(b.IsOwner(second), "2") {
		t.Fatal("write by the new holder was refused")
	}
	resp, err := cli.Get(testCtx(t, waitBound), data)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" {
		t.Fatalf("data = %v, %v; want 2", resp.Kvs, err)
	}
}
