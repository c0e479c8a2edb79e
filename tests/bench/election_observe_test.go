package bench_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// BenchmarkElectionObserveLag's observers: observeClients clients with
// observersPerClient observers each, all on one election.
const (
	observeClients     = 10
	observersPerClient = 10
	// observeRounds is how many rounds one iteration makes; a round is
	// two changes: the leader changes its value, then resigns.
	observeRounds = 10
)

// observeFunc runs one observer until ctx ends, calling saw with the
// value of each leader it is told of and the moment it was told. It
// returns an error if the observation ends before ctx does.
type observeFunc func(ctx context.Context, saw func(value string, at time.Time)) error

// observerSetup makes an implementation's observers of the election of
// s, each client with observersPerClient observers.
type observerSetup func(b *testing.B, s electionSetup) []observeFunc

// BenchmarkElectionObserveLag measures how long a leadership change takes
// to reach 100 observers spread over 10 clients of one election: from just
// before the call that makes the change to the moment each observer's
// loop is handed the new state (ashlock: Election.Observe yields it; etcd:
// concurrency.Election.Observe's channel delivers it). Two candidates on
// clients of their own take turns; each round the leader changes its
// value (ashlock: Guard.SetValue; etcd: Election.Proclaim) and then
// resigns, so that the candidate in line leads with the value it
// campaigned with. A change is complete once every observer has seen it;
// the next is made electionSettle later (untimed), by which time the
// resigner has campaigned again. States are told apart by their values,
// which are all different.
//
// Metrics, in milliseconds over every observer and change of the run:
// setvalue-p50/p99, resign-p50/p99 and p50/p99/max over both kinds.
// Target: ashlock's p99 under 100ms and below etcd-election's.
func BenchmarkElectionObserveLag(b *testing.B) {
	runInTurn(b, []implBench{
		{"ashlock", func(b *testing.B) { benchObserveLag(b, ashlockElection, ashlockObservers) }},
		{"etcd-election", func(b *testing.B) { benchObserveLag(b, etcdElection, etcdObservers) }},
	})
}

func ashlockObservers(b *testing.B, s electionSetup) []observeFunc {
	var obs []observeFunc
	for range observeClients {
		c, _ := newAshlock(b, newEtcd(b, nil), s.prefix)
		e := c.Election(electionName)
		for range observersPerClient {
			obs = append(obs, func(ctx context.Context, saw func(string, time.Time)) error {
				for l, err := range e.Observe(ctx) {
					at := time.Now()
					if err != nil {
						return err
					}
					saw(string(l.Value), at)
				}
				return nil
			})
		}
	}
	return obs
}

func etcdObservers(b *testing.B, s electionSetup) []observeFunc {
	var obs []observeFunc
	for range observeClients {
		sess := newSession(b, newEtcd(b, nil), int(electionTTL/time.Second))
		for range observersPerClient {
			el := concurrency.NewElection(sess, s.prefix)
			obs = append(obs, func(ctx context.Context, saw func(string, time.Time)) error {
				for resp := range el.Observe(ctx) {
					at := time.Now()
					if len(resp.Kvs) > 0 {
						saw(string(resp.Kvs[0].Value), at)
					}
				}
				if ctx.Err() == nil {
					return fmt.Errorf("etcd Observe ended")
				}
				return nil
			})
		}
	}
	return obs
}

// lagTracker collects, for the change under way, when each observer saw
// it.
type lagTracker struct {
	mu     sync.Mutex
	want   string    // the value the change publishes
	start  time.Time // just before the change was made
	seen   []bool    // per observer
	left   int
	done   chan struct{} // closed once every observer has seen it
	record *[]time.Duration
}

// expect starts a change that publishes value: the caller makes it right
// after. Lags go to record (none if nil).
func (t *lagTracker) expect(value string, record *[]time.Duration) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.want, t.record = value, record
	clear(t.seen)
	t.left = len(t.seen)
	t.done = make(chan struct{})
	t.start = time.Now()
	return t.done
}

func (t *lagTracker) saw(obs int, value string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if value != t.want || t.seen[obs] {
		return
	}
	t.seen[obs] = true
	if t.record != nil {
		*t.record = append(*t.record, at.Sub(t.start))
	}
	t.left--
	if t.left == 0 {
		close(t.done)
	}
}

func benchObserveLag(b *testing.B, setup electionImpl, observers observerSetup) {
	ctx, cancel := context.WithCancel(runCtx(b))
	s := setup(b, 2)
	obs := observers(b, s)
	cs := newCampaigns(ctx, s.cands)
	tr := &lagTracker{seen: make([]bool, len(obs))}
	errs := make(chan error, len(obs))
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		cs.wg.Wait()
	}()

	seq := 0
	value := func() string { seq++; return fmt.Sprint("v", seq) }
	// await waits until every observer has seen the change of ch.
	await := func(ch <-chan struct{}, what string) {
		select {
		case <-ch:
		case err := <-errs:
			b.Fatalf("observer: %v", err)
		case <-time.After(electionWait):
			b.Fatalf("%s: not seen by every observer within %v", what, electionWait)
		}
	}

	first := value()
	if _, err := s.cands[0].campaign(ctx, first); err != nil {
		b.Fatal(err)
	}
	pending := value() // the successor's value, published when it leads
	cs.start(1, pending)
	if err := s.queued(ctx, 2); err != nil {
		b.Fatal(err)
	}
	// Every observer first sees the current leader (untimed).
	ch := tr.expect(first, nil)
	for i, o := range obs {
		wg.Go(func() {
			if err := o(ctx, func(v string, at time.Time) { tr.saw(i, v, at) }); err != nil {
				errs <- err
			}
		})
	}
	await(ch, "the first leader")
	time.Sleep(electionSettle)

	var setLag, resignLag []time.Duration
	leader := 0
	for b.Loop() {
		for range observeRounds {
			v := value()
			ch := tr.expect(v, &setLag)
			if err := s.cands[leader].setValue(ctx, v); err != nil {
				b.Fatalf("candidate %d: set value: %v", leader, err)
			}
			await(ch, "a new value")
			time.Sleep(electionSettle)

			next := 1 - leader
			ch = tr.expect(pending, &resignLag)
			if err := s.cands[leader].resign(ctx); err != nil {
				b.Fatalf("candidate %d: resign: %v", leader, err)
			}
			if _, err := cs.next(next); err != nil {
				b.Fatal(err)
			}
			await(ch, "a new leader")
			pending = value()
			cs.start(leader, pending)
			if err := s.queued(ctx, 2); err != nil {
				b.Fatal(err)
			}
			time.Sleep(electionSettle)
			leader = next
		}
	}
	tr.mu.Lock() // observers may still be told of states nobody waits for
	setLag, resignLag = slices.Clone(setLag), slices.Clone(resignLag)
	tr.mu.Unlock()
	benchrun.ReportLatencies(b, "setvalue-", setLag)
	benchrun.ReportLatencies(b, "resign-", resignLag)
	benchrun.ReportLatencies(b, "", slices.Concat(setLag, resignLag))
}
