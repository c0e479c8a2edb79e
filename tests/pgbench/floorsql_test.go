package pgbench_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// floorSQL holds the statements backend/postgres sends for an exclusive
// lock, as recordFloorSQL recorded them from a live handoff: the lease's
// grant, the enqueue batch, the waiter's read and admission, and the
// release. The floor sends these very texts, so that it measures the
// protocol the backend runs: a change to its statements reaches the
// floor by itself.
type floorSQL struct {
	grant, lockKeys, bumpToken, reapSkip, insert, readQueue, status, admit, release string
}

// recorded is the run's floorSQL, recorded once.
var recorded struct {
	mu  sync.Mutex
	sql *floorSQL
}

// floorStatements returns the statements of a handoff, recording them on
// the first call of the run (see recordFloorSQL).
func floorStatements(b testing.TB) floorSQL {
	b.Helper()
	recorded.mu.Lock()
	defer recorded.mu.Unlock()
	if recorded.sql == nil {
		s := recordFloorSQL(b)
		recorded.sql = &s
	}
	return *recorded.sql
}

// recordFloorSQL records the statements of one handoff between two
// ashlock clients on Backends of their own, in a database of its own: a
// holder that takes the free key and releases it once the waiter has
// queued, and a waiter that takes the key then. It is the first Acquire
// of each client, so each grants its lease first. The holder sends the
// grant, the enqueue batch and the release; the waiter the grant, the
// same batch, one or more reads of the queue, its admission and its
// release. Anything else fails b: the floor would no longer be the
// backend's protocol.
func recordFloorSQL(b testing.TB) floorSQL {
	b.Helper()
	db := newDatabase(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hctr, wctr := &counter{}, &counter{}
	hc, closeHolder := openAshlock(b, db, "floor-recording-holder", hctr)
	defer closeHolder()
	wc, closeWaiter := openAshlock(b, db, "floor-recording-waiter", wctr)
	defer closeWaiter()
	watch, closeWatch := openAshlock(b, db, "floor-recording-watch", &counter{})
	defer closeWatch()

	hctr.record(true)
	wctr.record(true)
	g, err := hc.Lock("k").Acquire(ctx)
	if err != nil {
		b.Fatalf("floor recording: the holder's Acquire: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := wc.Lock("k").Acquire(ctx)
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	if err := benchrun.WaitQueued(ctx, watch, "k", 1); err != nil {
		b.Fatalf("floor recording: the waiter: %v", err)
	}
	if err := g.Unlock(ctx); err != nil {
		b.Fatalf("floor recording: the holder's Unlock: %v", err)
	}
	if err := <-got; err != nil {
		b.Fatalf("floor recording: the waiter: %v", err)
	}
	h, w := hctr.record(false), wctr.record(false)

	// h: grant, the batch's six statements, release.
	if len(h) != 8 || len(w) < 10 {
		b.Fatalf("floor recording: the holder sent %d statements (want 8), the waiter %d (want 10 or more):\n%s\n--\n%s",
			len(h), len(w), strings.Join(h, "\n"), strings.Join(w, "\n"))
	}
	s := floorSQL{
		grant: h[0], lockKeys: h[1], bumpToken: h[2], reapSkip: h[3], insert: h[4], readQueue: h[5], status: h[6],
		release: h[7], admit: w[len(w)-2],
	}
	reads := w[7 : len(w)-2]
	switch {
	case !slices.Equal(w[:7], h[:7]):
		b.Fatalf("floor recording: the waiter's grant and enqueue differ from the holder's:\n%s\n--\n%s",
			strings.Join(w[:7], "\n"), strings.Join(h[:7], "\n"))
	case w[len(w)-1] != s.release:
		b.Fatalf("floor recording: the waiter's last statement is not the holder's release: %s", w[len(w)-1])
	case slices.ContainsFunc(reads, func(q string) bool { return q != s.readQueue }):
		b.Fatalf("floor recording: the waiter sent more than reads of the queue between its enqueue and its admission:\n%s",
			strings.Join(reads, "\n"))
	}
	return s
}
