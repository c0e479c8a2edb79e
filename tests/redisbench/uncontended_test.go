package redisbench_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bsm/redislock"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// BenchmarkUncontended measures one uncontended Acquire+Unlock (one key,
// nobody else on it) of each implementation against one redis-server in
// one process, taking turns (see benchrun.Interleave):
//
//   - ashlock: Lock(k).Acquire then Guard.Unlock, on backend/redis
//     through ashlock.ConnectWith.
//   - ashlock-twin: a second, identical ashlock client: how far from 1.0
//     the method puts two identical implementations.
//   - redislock: bsm/redislock's Obtain then Lock.Release.
//   - floor: the very commands ashlock sends for one such cycle (its
//     enqueue and release scripts, by EVALSHA, with the same arguments but
//     a claim ID and token of its own), sent by hand on a plain go-redis
//     client with no bookkeeping at all: what any client of the backend's
//     protocol must pay.
//
// Metrics: per implementation ns/cycle and reqs/cycle (commands sent),
// and the ratios the targets are about: "ashlock/redislock" (target at
// most 1.2) and "ashlock/floor" (at most 1.3). ns/op is the time of one
// round of turns and means nothing by itself.
func BenchmarkUncontended(b *testing.B) {
	setFsync(b)
	impls := []benchrun.Impl[cycle]{
		{Name: "ashlock", Make: ashlockCycle},
		{Name: "ashlock-twin", Make: ashlockCycle},
		{Name: "redislock", Make: redislockCycle},
		{Name: "floor", Make: floorCycle},
	}
	perCycle := benchrun.Interleave(runCtx(b), b, impls)
	b.ReportMetric(perCycle[0]/perCycle[1], "ashlock/ashlock-twin")
	b.ReportMetric(perCycle[0]/perCycle[2], "ashlock/redislock")
	b.ReportMetric(perCycle[0]/perCycle[3], "ashlock/floor")
	b.ReportMetric(perCycle[3]/perCycle[2], "floor/redislock")
}

// cycle is one implementation of an uncontended Acquire+Unlock, with the
// counter of the client it talks through.
type cycle struct {
	run func(ctx context.Context) error
	ctr *counter
}

func (c cycle) Run(ctx context.Context) error { return c.run(ctx) }

// Count reports the commands sent as "<impl>-reqs/cycle".
func (c cycle) Count() func(b *testing.B, prefix string, n float64) {
	before := c.ctr.requests()
	return func(b *testing.B, prefix string, n float64) {
		b.ReportMetric(float64(c.ctr.requests()-before)/n, prefix+"reqs/cycle")
	}
}

func ashlockCycle(b testing.TB) cycle { return lockCycle(b, newPrefix("unc"), false) }

// lockCycle is an ashlock Acquire+Unlock of key "k" under prefix, of a
// reader when shared.
func lockCycle(b testing.TB, prefix string, shared bool) cycle {
	ctr := &counter{}
	lock := newAshlock(b, newClient(b, ctr), prefix).Lock("k")
	if shared {
		lock = lock.Shared()
	}
	return cycle{ctr: ctr, run: func(ctx context.Context) error {
		g, err := lock.Acquire(ctx)
		if err != nil {
			return err
		}
		return g.Unlock(ctx)
	}}
}

func redislockCycle(b testing.TB) cycle {
	ctr := &counter{}
	rl := redislock.New(newClient(b, ctr))
	key := newPrefix("unc") + "k"
	return cycle{ctr: ctr, run: func(ctx context.Context) error {
		l, err := rl.Obtain(ctx, key, leaseTTL, nil)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}}
}

// floorCycle records the two commands of one uncontended ashlock cycle
// (after a first cycle, which may grant the client's lease) and replays
// them: the enqueue with a claim ID of the floor's own, then the release
// of that ID with the token the enqueue returned. The recording client
// stays open, so its lease, which the enqueue names, stays alive.
func floorCycle(b testing.TB) cycle {
	ctx := runCtx(b)
	rec := &counter{}
	lock := newAshlock(b, newClient(b, rec), newPrefix("floor")).Lock("k")
	var cmds [][]any
	for i := range 2 {
		rec.recording(i == 1)
		g, err := lock.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		cmds = rec.recording(false)
	}
	// Each is EVALSHA sha 1 {p}token tag id lease|token ...: ARGV[2] (the
	// claim ID) is argument 5, ARGV[3] (the lease, or the release's token)
	// argument 6.
	if len(cmds) != 2 || !isEvalSha(cmds[0], 7) || !isEvalSha(cmds[1], 7) {
		b.Fatalf("floor: an uncontended ashlock cycle sent %d commands, not an enqueue and a release by EVALSHA: %v", len(cmds), cmds)
	}
	enq, rel := cmds[0], cmds[1]
	const id = "floor"
	enq[5], rel[5] = id, id
	ctr := &counter{}
	rc := newClient(b, ctr)
	return cycle{ctr: ctr, run: func(ctx context.Context) error {
		v, err := rc.Do(ctx, enq...).Slice()
		if err != nil {
			return err
		}
		if len(v) < 2 || v[0] != "ok" {
			return fmt.Errorf("floor: enqueue answered %v", v)
		}
		rel[6] = v[1]
		n, err := rc.Do(ctx, rel...).Int64()
		if err == nil && n != 1 {
			err = errors.New("floor: the release found no claim")
		}
		return err
	}}
}

func isEvalSha(args []any, min int) bool {
	name, _ := args[0].(string)
	return len(args) >= min && strings.EqualFold(name, "evalsha")
}
