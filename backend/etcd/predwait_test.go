package etcd

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// waiter is an acquisition, as far as waitAny needs one, on a fake.
func waiter(t *testing.T, tm *testMux) *acquisition {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := &Backend{ctx: ctx, reg: newRegistry(tm.mux, nil)}
	e := b.reg.addOne("k/", 1, nil)
	require.Equal(t, "k/1", e.key)
	return &acquisition{b: b, e: e, req: backend.AcquireRequest{Key: "k"}, dirs: []string{"k/"}}
}

// waitAsync runs waitAny for key in the background.
func waitAsync(ctx context.Context, a *acquisition, key string, from int64) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- a.waitAny(ctx, []string{key}, from, false) }()
	return ch
}

// A predecessor watch starts at etcd's current revision. When nothing was
// written since the waiter read the claim ahead, that covers every delete
// and no read is needed; otherwise one read closes the gap: the claim
// ahead, deleted in the gap, ends the wait at once, and one still there
// is waited for, with the watch resuming after the read if it must be
// created again.
func TestWaitDeletedClosesTheGap(t *testing.T) {
	t.Run("NoGap", func(t *testing.T) {
		tm := newTestMux(t)
		read := tm.e.put("pred")
		done := waitAsync(t.Context(), waiter(t, tm), "pred", read+1)
		tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 1 }, "the watch")
		tm.e.del("pred")
		if err := recv(t, done, "wait"); err != nil {
			t.Fatal(err)
		}
		if n := tm.e.readCount(); n != 0 {
			t.Fatalf("%d reads, want none", n)
		}
	})
	t.Run("DeletedInTheGap", func(t *testing.T) {
		tm := newTestMux(t)
		read := tm.e.put("pred")
		tm.e.del("pred") // before the watch exists: only the read can tell
		if err := recv(t, waitAsync(t.Context(), waiter(t, tm), "pred", read+1), "wait"); err != nil {
			t.Fatal(err)
		}
		if n := tm.e.readCount(); n != 1 {
			t.Fatalf("%d reads, want 1", n)
		}
	})
	t.Run("ReCreatedInTheGap", func(t *testing.T) {
		// A claim name is used again once free: the predecessor's name can
		// hold a later claim by the time the watch reaches etcd. That
		// claim is queued behind the waiter, so taking it for the
		// predecessor would deadlock the queue; the read must see the new
		// create revision and end the wait.
		tm := newTestMux(t)
		read := tm.e.put("pred")
		tm.e.del("pred")
		tm.e.put("pred") // a new incarnation under the same name
		if err := recv(t, waitAsync(t.Context(), waiter(t, tm), "pred", read+1), "wait"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("StillThereAfterTheGap", func(t *testing.T) {
		tm := newTestMux(t)
		read := tm.e.put("pred")
		created := tm.e.put("other") // the gap: the watch covers from created+1
		done := waitAsync(t.Context(), waiter(t, tm), "pred", read+1)
		tm.e.waitFor(t, func() bool { return tm.e.reads == 1 }, "the read")
		tm.e.put("more")
		// Only a wait that went on after the read has its watch created
		// again, and from where the read looked (the watch's start), not
		// from the wait's original start.
		tm.e.setOpenErr(errors.New("fake: down"))
		tm.e.breakStream()
		tm.e.setOpenErr(nil)
		tm.e.waitFor(t, func() bool { return len(tm.e.streams) == 2 && len(tm.e.createsLocked(1)) == 1 }, "the watch again")
		if start := tm.e.creates(1)[0].StartRevision; start != created+1 {
			t.Fatalf("watch created again from %d, want %d", start, created+1)
		}
		none(t, done, "wait before the delete")
		tm.e.del("pred")
		if err := recv(t, done, "wait"); err != nil {
			t.Fatal(err)
		}
	})
}

// A wait ends with the waiter's own claim's loss, its ctx, and a refused
// watch, each with its error.
func TestWaitDeletedEnds(t *testing.T) {
	tm := newTestMux(t)
	a := waiter(t, tm)
	tm.e.put("pred")
	read := tm.e.put(a.e.key)
	a.b.reg.waitDelay = 0
	a.b.reg.setToken(a.e, read)
	a.b.reg.waiting(a.e) // its own claim watched at once

	ctx, cancel := context.WithCancel(t.Context())
	done := waitAsync(ctx, a, "pred", read+1)
	cancel()
	if err := recv(t, done, "cancelled wait"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v, want context.Canceled", err)
	}

	tm.e.refuseKey("refused", "etcdserver: permission denied")
	if err := recv(t, waitAsync(t.Context(), a, "refused", read+1), "refused wait"); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("wait on a refused watch: %v, want ErrUnavailable", err)
	}

	done = waitAsync(t.Context(), a, "pred", read+1)
	tm.e.del(a.e.key)
	if err := recv(t, done, "wait of a lost claim"); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Fatalf("wait of a lost claim: %v, want ErrLeaseExpired", err)
	}
}
