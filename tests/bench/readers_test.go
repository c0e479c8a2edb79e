package bench_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// readerCounts are the numbers of queued readers BenchmarkReaderAdmission
// measures: the 16 of the target in BENCHMARKS.md, and 64 to show what
// grows with it.
var readerCounts = []int{16, 64}

const (
	// admissionRounds is how many writer releases one iteration of
	// BenchmarkReaderAdmission measures; percentiles are over every round
	// of the run.
	admissionRounds = 5
	// admissionSettle is how long the readers wait in the queue, all of
	// them queued, before the writer releases: longer than etcd's 100 ms
	// watch catch-up, so that every reader's watch of either
	// implementation is live and the release alone is measured.
	admissionSettle = 200 * time.Millisecond
	// admissionBound is how long a round waits for the readers to queue
	// and, after the release, to hold, before it fails.
	admissionBound = 30 * time.Second
)

// rwSetup makes, under prefix, a writer and n readers of one key, each on
// an etcd client of its own (the writer's counted by wctr, the readers' by
// rctr), and queued, which says how many readers are waiting in the key's
// queue, asked on a client of its own that is not counted.
type rwSetup func(b *testing.B, wctr, rctr *rpcCounter, prefix string, n int) (writer benchrun.Take, readers []benchrun.Take, queued func(context.Context) (int, error))

// BenchmarkReaderAdmission has a writer hold a key while n readers queue
// behind it, each on its own client, then release it: the round measures
// the time from just before the writer's Unlock to the moment the last
// reader's acquisition returns (all n holding at once), then the readers
// release and the next round begins. The readers are queued and have
// waited admissionSettle before the release. ashlock (Lock(k) for the
// writer, Lock(k).Shared() for the readers) is measured against etcd's
// client/v3/experimental/recipes RWMutex (Lock/Unlock, RLock/RUnlock, one
// Session per client), and against the library's protocol sent by hand
// with and without the acquired-at record written at admission
// (floor-record and floor-read, see rawRW). Target: ashlock's admission
// faster than the recipe's.
//
// Metrics, over admissionRounds rounds per iteration: "admit-p50-ms" and
// "admit-max-ms" (Unlock to all n holding), "first-p50-ms" (Unlock to the
// first reader holding); "rpcs/reader" and "msgs-in/reader", what the
// readers' clients sent and received per reader over a whole round (queue,
// wait, admission, release); "admit-rpcs/reader", what all clients sent
// from just before the Unlock to the last reader holding, per reader; and
// "writer-rpcs/round", the writer's Lock and Unlock. Requests exclude
// lease keep-alives. ns/op is the time of admissionRounds whole rounds,
// settling included, and means nothing by itself.
func BenchmarkReaderAdmission(b *testing.B) {
	impls := []struct {
		name  string
		setup rwSetup
	}{
		{"ashlock", ashlockRW},
		{"etcd-recipe", recipeRW},
		{"floor-record", rawRW(true)},
		{"floor-read", rawRW(false)},
	}
	for _, n := range readerCounts {
		b.Run(fmt.Sprintf("readers=%d", n), func(b *testing.B) {
			for _, impl := range impls {
				b.Run("impl="+impl.name, func(b *testing.B) {
					compact(b, newEtcd(b, nil))
					var wctr, rctr rpcCounter
					writer, readers, queued := impl.setup(b, &wctr, &rctr, newPrefix("readers"), n)
					benchAdmission(b, &wctr, &rctr, writer, readers, queued)
				})
			}
		})
	}
}

func ashlockRW(b *testing.B, wctr, rctr *rpcCounter, prefix string, n int) (benchrun.Take, []benchrun.Take, func(context.Context) (int, error)) {
	w, _ := newAshlock(b, newEtcd(b, wctr), prefix)
	writer := benchrun.Acquire(w.Lock("k"))
	readers := make([]benchrun.Take, n)
	for i := range readers {
		c, _ := newAshlock(b, newEtcd(b, rctr), prefix)
		readers[i] = benchrun.Acquire(c.Lock("k").Shared())
	}
	obs, _ := newAshlock(b, newEtcd(b, nil), prefix)
	queued := func(ctx context.Context) (int, error) {
		info, err := obs.Inspect(ctx, "k")
		return len(info.Waiters), err
	}
	return writer, readers, queued
}

// recipeRW is etcd's recipe RWMutex. Its methods take no context (it uses
// context.TODO): a reader stuck in RLock is ended by closing its client,
// which b.Cleanup does.
func recipeRW(b *testing.B, wctr, rctr *rpcCounter, prefix string, n int) (benchrun.Take, []benchrun.Take, func(context.Context) (int, error)) {
	name := prefix + "k"
	wm := recipe.NewRWMutex(newSession(b, newEtcd(b, wctr), 0), name)
	writer := func(context.Context) (func(context.Context) error, error) {
		if err := wm.Lock(); err != nil {
			return nil, err
		}
		return func(context.Context) error { return wm.Unlock() }, nil
	}
	readers := make([]benchrun.Take, n)
	for i := range readers {
		m := recipe.NewRWMutex(newSession(b, newEtcd(b, rctr), 0), name)
		readers[i] = func(context.Context) (func(context.Context) error, error) {
			if err := m.RLock(); err != nil {
				return nil, err
			}
			return func(context.Context) error { return m.RUnlock() }, nil
		}
	}
	obs := newEtcd(b, nil)
	queued := func(ctx context.Context) (int, error) {
		// The recipe's readers are the keys NAME/read/<nanoseconds>.
		resp, err := obs.Get(ctx, name+"/read/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return 0, err
		}
		return int(resp.Count), nil
	}
	return writer, readers, queued
}

// admission is one round's result.
type admission struct {
	first, all    time.Duration // from just before the Unlock
	readers       counts        // the readers' clients over the whole round
	writer        counts        // the writer's client over the whole round
	admitRequests int64         // every client, from the Unlock to all holding
}

func benchAdmission(b *testing.B, wctr, rctr *rpcCounter, writer benchrun.Take, readers []benchrun.Take, queued func(context.Context) (int, error)) {
	ctx := runCtx(b)
	// Warm up untimed: every client grants its lease and opens its
	// streams, and the first round's setup costs are not measured.
	if _, err := admissionRound(ctx, wctr, rctr, writer, readers, queued); err != nil {
		b.Fatal(err)
	}
	var rounds []admission
	for b.Loop() {
		for range admissionRounds {
			a, err := admissionRound(ctx, wctr, rctr, writer, readers, queued)
			if err != nil {
				b.Fatal(err)
			}
			rounds = append(rounds, a)
		}
	}
	n := float64(len(readers))
	var first, all []time.Duration
	var rd, wd counts
	var admit int64
	for _, a := range rounds {
		first, all = append(first, a.first), append(all, a.all)
		rd, wd = rd.add(a.readers), wd.add(a.writer)
		admit += a.admitRequests
	}
	r := float64(len(rounds))
	b.ReportMetric(benchrun.Millis(benchrun.Percentile(all, 0.5)), "admit-p50-ms")
	b.ReportMetric(benchrun.Millis(benchrun.Percentile(all, 1)), "admit-max-ms")
	b.ReportMetric(benchrun.Millis(benchrun.Percentile(first, 0.5)), "first-p50-ms")
	b.ReportMetric(float64(rd.requests())/r/n, "rpcs/reader")
	b.ReportMetric(float64(rd.streamRecv)/r/n, "msgs-in/reader")
	b.ReportMetric(float64(admit)/r/n, "admit-rpcs/reader")
	b.ReportMetric(float64(wd.requests())/r, "writer-rpcs/round")
}

// admissionRound runs one round: the writer takes the key, every reader
// queues behind it, and once all are queued and have waited
// admissionSettle the writer releases; it returns when every reader has
// held the key and released it again.
func admissionRound(ctx context.Context, wctr, rctr *rpcCounter, writer benchrun.Take, readers []benchrun.Take, queued func(context.Context) (int, error)) (admission, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*admissionBound)
	defer cancel()
	w0, r0 := wctr.snapshot(), rctr.snapshot()
	release, err := writer(ctx)
	if err != nil {
		return admission{}, fmt.Errorf("writer: %w", err)
	}

	type held struct {
		at  time.Time
		err error
	}
	results := make(chan held, len(readers))
	releaseAll := make(chan struct{})
	releaseErrs := make(chan error, len(readers))
	var wg sync.WaitGroup
	for _, reader := range readers {
		wg.Go(func() {
			rel, err := reader(ctx)
			results <- held{time.Now(), err}
			if err != nil {
				return
			}
			select {
			case <-releaseAll:
			case <-ctx.Done():
			}
			if err := rel(context.WithoutCancel(ctx)); err != nil {
				releaseErrs <- err
			}
		})
	}
	done := false
	defer func() {
		cancel()
		if !done {
			// The recipe's RLock ignores ctx: a reader stuck in it ends
			// when b.Cleanup closes its client. Do not wait for it here.
			return
		}
		wg.Wait()
	}()

	// Wait until every reader is queued (or one already holds, which
	// would be a failure of the lock, reported below).
	deadline := time.Now().Add(admissionBound)
	for {
		q, err := queued(ctx)
		if err != nil {
			return admission{}, fmt.Errorf("counting queued readers: %w", err)
		}
		if q >= len(readers) {
			break
		}
		if len(results) > 0 {
			r := <-results
			return admission{}, fmt.Errorf("a reader got through while the writer held the key (err %v)", r.err)
		}
		if time.Now().After(deadline) {
			return admission{}, fmt.Errorf("%d of %d readers queued after %v", q, len(readers), admissionBound)
		}
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(admissionSettle) // the scenario: readers waiting in the queue
	if len(results) > 0 {
		r := <-results
		return admission{}, fmt.Errorf("a reader got through while the writer held the key (err %v)", r.err)
	}

	before := wctr.snapshot().add(rctr.snapshot())
	start := time.Now()
	if err := release(ctx); err != nil {
		return admission{}, fmt.Errorf("writer's release: %w", err)
	}
	var times []time.Time
	bound := time.After(admissionBound)
	for len(times) < len(readers) {
		select {
		case r := <-results:
			if r.err != nil {
				return admission{}, fmt.Errorf("reader: %w", r.err)
			}
			times = append(times, r.at)
		case <-bound:
			return admission{}, fmt.Errorf("%d of %d readers hold %v after the writer's release (shared locks not supported by the backend?)",
				len(times), len(readers), admissionBound)
		}
	}
	admitted := wctr.snapshot().add(rctr.snapshot()).sub(before)
	close(releaseAll)
	wg.Wait()
	done = true
	select {
	case err := <-releaseErrs:
		return admission{}, fmt.Errorf("reader's release: %w", err)
	default:
	}
	return admission{
		first:         slices.MinFunc(times, time.Time.Compare).Sub(start),
		all:           slices.MaxFunc(times, time.Time.Compare).Sub(start),
		readers:       rctr.snapshot().sub(r0),
		writer:        wctr.snapshot().sub(w0),
		admitRequests: admitted.requests(),
	}, nil
}

// add returns the sum of two snapshots.
func (c counts) add(d counts) counts {
	return counts{
		unary:      c.unary + d.unary,
		streamSent: c.streamSent + d.streamSent,
		streamRecv: c.streamRecv + d.streamRecv,
		keepAlives: c.keepAlives + d.keepAlives,
	}
}
