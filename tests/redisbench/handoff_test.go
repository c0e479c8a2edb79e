package redisbench_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// waiterCounts are the queue lengths BenchmarkHandoff measures.
var waiterCounts = []int{8, 32, 128}

// pollTTL is the lock TTL of the polling locks (redsync's default
// expiry); pollBackoff is redislock's retry interval, which by default
// does not retry at all.
const (
	pollTTL     = 8 * time.Second
	pollBackoff = 100 * time.Millisecond
)

// handoffSetup makes n contenders for one key under prefix, each on a
// go-redis client of its own counted by ctr.
type handoffSetup func(b *testing.B, ctr *counter, prefix string, n int) []benchrun.Take

// BenchmarkHandoff has N contenders, each on a client of its own, take
// one key in a loop with an empty critical section: each asks again as
// soon as its release returns, knowing nothing of the others (as separate
// processes would), so N-1 contenders are waiting (or about to) at any
// time. A handoff is an acquisition by another contender than the last
// holder: a lock that lets its releaser take it again at once (the polling
// locks do, ashlock queues it at the back) gets no handoff for that.
// ns/op is the time per handoff; metrics: handoffs/s, acquisitions/s (a
// contender taking the lock again counted too), reqs/handoff (commands
// sent by all clients together), write-ms (see probe),
// release-ms, the median time a contender's release took: one round trip
// and one fsync if nothing was being written when it arrived, more if it
// had to wait for the fsync of writes that came just before it, and
// srv-cpu-us/handoff, the CPU time the server's main thread spent per
// handoff (INFO cpu; the kernel's share of its fsyncs and socket writes
// included), what N contenders cost the server that every other client
// shares.
//
// Targets: ashlock's handoffs/s at least 5x redsync's (its default retries:
// 32 tries 50 to 250 ms apart; a contender whose tries run out tries again)
// and redislock's (retrying every 100 ms until its TTL, then again), and
// ashlock's reqs/handoff constant in N. ashlock-one-backend is not a
// peer but a diagnosis: its N clients (N leases) share one Backend, so one
// subscriber connection instead of N receives each event; the gap to
// ashlock is what N subscribers in one process cost per handoff. floor
// is not a peer either but the physical bound (see floorHandoff): the
// very commands of an ashlock handoff sent back to back by one client,
// the rate handoffs would go at if waking the next holder were free.
// Nor is ideal-loop (see floor.measureLoop): the closed loop of this
// benchmark with contenders that take no time, writing only what a lock
// that queues its waiters durably must (the release, and the released
// contender's return to the queue), the two sent at the same instant.
// It is a reference, not a bound: whether two writes share an fsync is
// a matter of timing, which ashlock's own contenders sometimes hit
// better. Each implementation's row also gives floor-handoffs/s and
// ideal-loop-handoffs/s, their rates measured just before and just after
// it (b.N handoffs each; the server's fsync time swings with the
// machine's other disk work), and x-floor and x-ideal-loop, its rate
// over theirs. subcmds/handoff counts the commands of Pub/Sub subscribers (SUBSCRIBE,
// UNSUBSCRIBE, PING), which go-redis hooks do not see, from the server's
// statistics. Run with few iterations
// (-benchtime Nx): the polling locks are slow.
func BenchmarkHandoff(b *testing.B) {
	setFsync(b)
	impls := []struct {
		name  string
		setup handoffSetup
	}{
		{"ashlock", ashlockContenders},
		{"ashlock-one-backend", oneBackendContenders},
		{"redsync", redsyncContenders},
		{"redislock", redislockContenders},
	}
	for _, n := range waiterCounts {
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			b.Run("impl=floor", func(b *testing.B) { floorHandoff(b, n) })
			b.Run("impl=ideal-loop", func(b *testing.B) { idealLoopHandoff(b, n) })
			f := newFloor(b, n)
			for _, impl := range impls {
				b.Run("impl="+impl.name, func(b *testing.B) {
					var ctr counter
					cycles := impl.setup(b, &ctr, newPrefix("handoff"), n)
					var around floorTime
					around.add(b, f)
					runHandoff(b, &ctr, cycles)
					around.add(b, f)
					around.report(b)
				})
			}
		})
	}
}

func ashlockContenders(b *testing.B, ctr *counter, prefix string, n int) []benchrun.Take {
	cycles := make([]benchrun.Take, n)
	for i := range cycles {
		cycles[i] = benchrun.Acquire(newAshlock(b, newClient(b, ctr), prefix).Lock("k"))
	}
	return cycles
}

func oneBackendContenders(b *testing.B, ctr *counter, prefix string, n int) []benchrun.Take {
	be := newBackend(b, newClient(b, ctr), prefix)
	cycles := make([]benchrun.Take, n)
	for i := range cycles {
		cycles[i] = benchrun.Acquire(connect(b, be).Lock("k"))
	}
	return cycles
}

func redsyncContenders(b *testing.B, ctr *counter, prefix string, n int) []benchrun.Take {
	cycles := make([]benchrun.Take, n)
	for i := range cycles {
		rs := redsync.New(redsyncgoredis.NewPool(newClient(b, ctr)))
		m := rs.NewMutex(prefix + "k")
		unlock := func(ctx context.Context) error {
			ok, err := m.UnlockContext(ctx)
			if err == nil && !ok {
				err = errors.New("redsync: unlock found the lock gone")
			}
			return err
		}
		cycles[i] = func(ctx context.Context) (func(context.Context) error, error) {
			for {
				err := m.LockContext(ctx)
				var taken *redsync.ErrTaken
				switch {
				case err == nil:
					return unlock, nil
				case ctx.Err() == nil && (errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken)):
					// Its tries ran out: a caller that must have the
					// lock asks again.
				default:
					return nil, err
				}
			}
		}
	}
	return cycles
}

func redislockContenders(b *testing.B, ctr *counter, prefix string, n int) []benchrun.Take {
	cycles := make([]benchrun.Take, n)
	opts := &redislock.Options{RetryStrategy: redislock.LinearBackoff(pollBackoff)}
	for i := range cycles {
		rl := redislock.New(newClient(b, ctr))
		cycles[i] = func(ctx context.Context) (func(context.Context) error, error) {
			for {
				// Without a deadline of ctx's, Obtain retries until the TTL.
				l, err := rl.Obtain(ctx, prefix+"k", pollTTL, opts)
				switch {
				case err == nil:
					return l.Release, nil
				case ctx.Err() == nil && errors.Is(err, redislock.ErrNotObtained):
				default:
					return nil, err
				}
			}
		}
	}
	return cycles
}

// floorTime adds up the runs of the floor and the ideal loop, b.N
// handoffs each, made around an implementation's run.
type floorTime struct {
	chain    time.Duration // the floor's releases
	loop     time.Duration // the ideal loop's handoffs
	handoffs int           // of each
}

func (t *floorTime) add(b *testing.B, f *floor) {
	b.Helper()
	c, err := f.measure(runCtx(b), b.N)
	if err != nil {
		b.Fatal(err)
	}
	l, err := f.measureLoop(runCtx(b), b.N)
	if err != nil {
		b.Fatal(err)
	}
	t.chain, t.loop, t.handoffs = t.chain+c, t.loop+l, t.handoffs+b.N
}

// report reports their rates beside the implementation's, reading
// the handoffs/s it reported (its b.Elapsed).
func (t *floorTime) report(b *testing.B) {
	rate := float64(b.N) / b.Elapsed().Seconds()
	floorRate := float64(t.handoffs) / t.chain.Seconds()
	b.ReportMetric(floorRate, "floor-handoffs/s")
	b.ReportMetric(rate/floorRate, "x-floor")
	loopRate := float64(t.handoffs) / t.loop.Seconds()
	b.ReportMetric(loopRate, "ideal-loop-handoffs/s")
	b.ReportMetric(rate/loopRate, "x-ideal-loop")
}

// probeEvery paces the probe's writes and probeWrites is how many it
// times: often and many enough to sample the server's write latency under
// the load, rarely enough to add little to it.
const (
	probeEvery  = 5 * time.Millisecond
	probeWrites = 100
)

// probe writes to a key of its own probeWrites times, one write at a time
// every probeEvery, on a client of its own, and returns the median time a
// write took: one round trip and the wait for the fsync (appendfsync
// always) that the write joins, the least a durable handoff can cost at
// that moment. It runs after the timed stretch, while the contenders keep
// going, so that its own writes (and their fsyncs, which a handoff would
// otherwise wait for) are not in the rate it is set beside.
func probe(ctx context.Context, b *testing.B) time.Duration {
	c := newClient(b, nil)
	key := newPrefix("probe") + "n"
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	took := make([]time.Duration, 0, probeWrites)
	for range probeWrites {
		start := time.Now()
		if err := c.Incr(ctx, key).Err(); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
		select {
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-tick.C:
		}
	}
	return benchrun.Percentile(took, 0.5)
}

// runHandoff runs the contenders until b.N handoffs have been timed. The
// first len(cycles) handoffs are a warm-up that fills the queue; the timer
// and the request counts cover the next b.N handoffs only, so that N-1
// contenders are waiting during all of the measured part (the ones still
// waiting at the end are cancelled, untimed).
func runHandoff(b *testing.B, ctr *counter, cycles []benchrun.Take) {
	b.StopTimer()
	base := runCtx(b)
	ctx, stop := context.WithCancel(base)
	defer stop()
	var releases releaseTimes
	cycles = releases.timing(cycles)

	warm := int64(len(cycles))
	total := warm + int64(b.N)
	// Counting only: the contenders learn nothing from these.
	var handoffs, acquisitions, last atomic.Int64 // last: the last holder's index + 1
	var acquiredAt [2]int64                       // acquisitions at the warm-up's end and at the run's
	warmed, finished := make(chan struct{}), make(chan struct{})
	failed := make(chan error, len(cycles)) // each contender sends at most once

	var wg sync.WaitGroup
	for i, cycle := range cycles {
		me := int64(i + 1)
		wg.Go(func() {
			// Asks again as soon as it has released.
			benchrun.Contend(ctx, base, cycle, failed, func() (<-chan struct{}, bool) {
				n := acquisitions.Add(1)
				if last.Swap(me) != me {
					switch handoffs.Add(1) {
					case warm:
						acquiredAt[0] = n
						close(warmed)
					case total:
						acquiredAt[1] = n
						close(finished)
					}
				}
				return nil, true
			})
		})
	}

	err := benchrun.Await(base, warmed, failed, "handoff")
	if err == nil {
		before, subs := ctr.requests(), subCommands(b)
		cpu := serverInfo(base, b, newClient(b, nil)).cpu
		releases.on.Store(true)
		b.ResetTimer()
		b.StartTimer()
		err = benchrun.Await(base, finished, failed, "handoff")
		b.StopTimer()
		releases.on.Store(false)
		reqs, subsEnd := ctr.requests()-before, subCommands(b)-subs
		cpu = serverInfo(base, b, newClient(b, nil)).cpu - cpu
		if err == nil {
			write := probe(base, b)
			b.ReportMetric(benchrun.Millis(write), "write-ms")
			b.ReportMetric(benchrun.Millis(releases.median()), "release-ms")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()*write.Seconds(), "handoffs/write")
			b.ReportMetric(float64(reqs)/float64(b.N), "reqs/handoff")
			b.ReportMetric(float64(subsEnd)/float64(b.N), "subs/handoff")
			b.ReportMetric(cpu*1e6/float64(b.N), "srv-cpu-us/handoff")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handoffs/s")
			b.ReportMetric(float64(acquiredAt[1]-acquiredAt[0])/b.Elapsed().Seconds(), "acquisitions/s")
		}
	}
	stop()
	wg.Wait()
	if err != nil {
		b.Fatal(err)
	}
}

// releaseTimes records how long the contenders' releases take while on:
// a release that waits for an fsync begun before it arrived takes longer
// than write-ms's one round trip and one fsync.
type releaseTimes struct {
	on   atomic.Bool
	mu   sync.Mutex
	took []time.Duration
}

// timing returns takes whose releases are timed.
func (r *releaseTimes) timing(takes []benchrun.Take) []benchrun.Take {
	out := make([]benchrun.Take, len(takes))
	for i, take := range takes {
		out[i] = func(ctx context.Context) (func(context.Context) error, error) {
			release, err := take(ctx)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				start := time.Now()
				err := release(ctx)
				if took := time.Since(start); r.on.Load() {
					r.mu.Lock()
					r.took = append(r.took, took)
					r.mu.Unlock()
				}
				return err
			}, nil
		}
	}
	return out
}

func (r *releaseTimes) median() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return benchrun.Percentile(r.took, 0.5)
}

// subCommands returns how many SUBSCRIBE and UNSUBSCRIBE commands the
// server has run (INFO commandstats).
func subCommands(b *testing.B) int64 {
	info, err := newClient(b, nil).Info(runCtx(b), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_subscribe" && name != "cmdstat_unsubscribe") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			b.Fatalf("commandstats: %q: %v", line, err)
		}
		n += c
	}
	return n
}
