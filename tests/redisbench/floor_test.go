package redisbench_test

import (
	"fmt"
	"testing"
	"time"
)

// handoffScripts are the commands of one ashlock handoff, recorded from a
// live one: the holder's release, the next claim's read of the claims
// ahead of it, its admission, and the holder's enqueue at the back.
type handoffScripts struct {
	enqueue, release, read, admit []any
}

// recordHandoff records a handoff between two ashlock clients on Backends
// of their own: a holder, and a waiter that takes the key when the holder
// releases. The holder's client stays open, so that its lease, which the
// recorded enqueue names, stays alive.
func recordHandoff(b *testing.B) handoffScripts {
	ctx := runCtx(b)
	prefix := newPrefix("floor-handoff")
	hrec, wrec := &counter{}, &counter{}
	holder := newAshlock(b, newClient(b, hrec), prefix).Lock("k")
	watch := newAshlock(b, newClient(b, nil), prefix)
	waiter := newAshlock(b, newClient(b, wrec), prefix).Lock("k")
	g, err := holder.Acquire(ctx) // grants the holder's lease
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	hrec.recording(true)
	if g, err = holder.Acquire(ctx); err != nil {
		b.Fatal(err)
	}
	wrec.recording(true)
	got := make(chan error, 1)
	go func() {
		w, err := waiter.Acquire(ctx)
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	for {
		// The waiter's enqueue sets its claim ID; wait until it is queued.
		info, err := watch.Inspect(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		if len(info.Waiters) == 1 {
			break
		}
		select {
		case <-ctx.Done():
			b.Fatal("floor: the waiter never queued")
		case <-time.After(time.Millisecond):
		}
	}
	if err := g.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	if err := <-got; err != nil {
		b.Fatal(err)
	}
	h, w := hrec.recording(false), wrec.recording(false)
	// The holder: an uncontended enqueue and the release. The waiter: its
	// enqueue, reads (one or more), its admission and its release.
	if len(h) != 2 || len(w) < 4 {
		b.Fatalf("floor: a handoff sent %d and %d commands: %v %v", len(h), len(w), h, w)
	}
	s := handoffScripts{enqueue: h[0], release: h[1], read: w[len(w)-3], admit: w[len(w)-2]}
	for _, c := range [][]any{s.enqueue, s.release, s.read, s.admit} {
		if !isEvalSha(c, 7) {
			b.Fatalf("floor: not a script run by EVALSHA: %v", c)
		}
	}
	return s
}

// floorClaim is one claim of the floor's queue.
type floorClaim struct{ id, token string }

// floorHandoff runs b.N handoffs of the very commands ashlock sends for
// one, back to back on one client with no waiting: a queue of n claims
// under the holder's lease; each handoff releases the head, reads the
// queue ahead of the next claim, records the next claim's admission and
// enqueues the released one at the back again. It reports handoffs/s and,
// as chain-handoffs/s, the rate if a handoff cost only its release and the
// admission that must follow it (the two writes, each fsynced, of the
// chain from one holder to the next).
func floorHandoff(b *testing.B, n int) {
	s := recordHandoff(b)
	ctx := runCtx(b)
	ctr := &counter{}
	rc := newClient(b, ctr)
	run := func(args []any, set map[int]any) ([]any, error) {
		v, err := rc.Do(ctx, with(args, set)...).Result()
		if err != nil {
			return nil, err
		}
		out, _ := v.([]any)
		return out, nil
	}
	// Argument 5 is each script's ARGV[2], the claim ID; argument 6 is the
	// enqueue's lease, kept, or the token of the others; the read's last
	// argument the highest token to list.
	enqueue := func(id string) (string, error) {
		v, err := run(s.enqueue, map[int]any{5: id})
		if err != nil {
			return "", err
		}
		if len(v) < 2 || (v[0] != "ok" && v[0] != "queued") {
			return "", fmt.Errorf("floor: enqueue answered %v", v)
		}
		tok, _ := v[1].(string)
		return tok, nil
	}
	q := make([]floorClaim, 0, n)
	for i := range n {
		id := fmt.Sprintf("floor-%d", i)
		tok, err := enqueue(id)
		if err != nil {
			b.Fatal(err)
		}
		q = append(q, floorClaim{id, tok})
	}
	if _, err := run(s.admit, map[int]any{5: q[0].id, 6: q[0].token}); err != nil {
		b.Fatal(err)
	}
	before := ctr.requests()
	var chain time.Duration
	b.ResetTimer()
	for range b.N {
		head, next := q[0], q[1]
		start := time.Now()
		if _, err := run(s.release, map[int]any{5: head.id, 6: head.token}); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if _, err := run(s.read, map[int]any{len(s.read) - 1: next.token}); err != nil {
			b.Fatal(err)
		}
		at := time.Now()
		v, err := run(s.admit, map[int]any{5: next.id, 6: next.token})
		if err != nil || len(v) == 0 || v[0] != "ok" {
			b.Fatalf("floor: admit answered %v, %v", v, err)
		}
		chain += mid.Sub(start) + time.Since(at)
		tok, err := enqueue(head.id)
		if err != nil {
			b.Fatal(err)
		}
		q = append(q[1:], floorClaim{head.id, tok})
	}
	b.StopTimer()
	b.ReportMetric(float64(ctr.requests()-before)/float64(b.N), "reqs/handoff")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handoffs/s")
	b.ReportMetric(float64(b.N)/chain.Seconds(), "chain-handoffs/s")
}

// with returns a copy of args with the arguments set replaced.
func with(args []any, set map[int]any) []any {
	c := append([]any(nil), args...)
	for i, v := range set {
		c[i] = v
	}
	return c
}
