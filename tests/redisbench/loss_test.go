package redisbench_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// lossTrials is how many losses one iteration of BenchmarkDeleteToDone
// measures; percentiles are taken over every trial of the run.
const lossTrials = 50

// doneBound is how long a trial waits for Done before failing.
const doneBound = 10 * time.Second

// BenchmarkDeleteToDone measures how long after an operator DELs the
// lease key of a held lock ({prefix}lease:<id>, the layout of
// backend/redis) the guard's Done closes: the time from just before the
// operator's DEL, sent on a client of its own, to the closing of Done.
// The server runs with keyspace notifications on (KEgx), which the
// Backend subscribes to. Each trial is a fresh ashlock client (so a
// fresh lease) on one shared Backend, acquiring a key of its own; the
// operator acts as soon as Acquire has returned. Target: p99 < 100 ms.
// Metrics p50-ms, p99-ms and max-ms cover lossTrials trials per
// iteration, all iterations together; ns/op is the time of a whole
// iteration and is not a figure of merit.
func BenchmarkDeleteToDone(b *testing.B) {
	setFsync(b)
	ctx := runCtx(b)
	prefix := newPrefix("loss")
	be := newBackend(b, newClient(b, nil), prefix)
	op := newClient(b, nil)
	var lat []time.Duration
	trial := 0
	for b.Loop() {
		for range lossTrials {
			trial++
			d, err := deleteToDone(ctx, b, be, op, prefix, fmt.Sprint("k", trial))
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, d)
		}
	}
	benchrun.ReportLatencies(b, "", lat)
}

// deleteToDone runs one trial: a fresh client takes key, the operator DELs
// its lease, and it returns how long Done took to close.
func deleteToDone(ctx context.Context, b *testing.B, be *redisb.Backend, op *goredis.Client, prefix, key string) (time.Duration, error) {
	c := connect(b, be)
	defer func() { _ = c.Close(ctx) }()
	g, err := c.Lock(key).Acquire(ctx)
	if err != nil {
		return 0, err
	}
	claim, err := g.Claim()
	if err != nil {
		return 0, err
	}
	lease := "{" + prefix + "}lease:" + strconv.FormatInt(int64(claim.Lease), 10)
	start := time.Now()
	n, err := op.Del(ctx, lease).Result()
	if err != nil {
		return 0, err
	}
	if n != 1 {
		return 0, fmt.Errorf("DEL %s removed %d keys, not the lease", lease, n)
	}
	select {
	case <-g.Done():
		return time.Since(start), nil
	case <-time.After(doneBound):
		return 0, fmt.Errorf("Done still open %v after the DEL of %s", doneBound, lease)
	}
}
