package bench_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// electionTTL is the leaders' lease TTL in the election benchmarks, for
// ashlock and etcd alike: 2s, the shortest the member grants (etcd raises
// a shorter TTL to 1.5 election timeouts, rounded up to whole seconds).
// Both renew every third of it, so electionRenewal is the renewal
// interval of each.
const (
	electionTTL     = 2 * time.Second
	electionRenewal = electionTTL / 3
)

// electionName is the election every candidate of a benchmark runs in.
const electionName = "leader"

// electionWait bounds every wait of the election benchmarks for something
// that should happen (a campaign to return, a queue to fill, an observer
// to see a change), so that a stuck store fails the benchmark instead of
// hanging it.
const electionWait = 30 * time.Second

// resignTrials is how many resignations one iteration of
// BenchmarkElectionFailover times; percentiles cover every trial of the
// run.
const resignTrials = 50

// candidateCounts are the numbers of candidates BenchmarkElectionFailover
// keeps campaigning: the leader and one successor, or a queue of seven.
var candidateCounts = []int{2, 8}

// electionSettle is how long a settled successor has been in line when
// its leader resigns or a change is made: longer than etcd's resync of
// watchers that start in the past (every 100ms; a watch for a revision
// already reached waits for it) and ashlock's claim watch delay (5ms to
// 10ms), so that both wait as they would after waiting for a while.
const electionSettle = 200 * time.Millisecond

// candidate is one candidate of an election, on an etcd client of its own.
// campaign blocks until it leads and returns its term (ashlock: the
// guard's fencing token; etcd: Election.Rev, its key's create revision);
// setValue changes the value it publishes while it leads; resign ends
// its term. A candidate campaigns again only after resigning.
type candidate interface {
	campaign(ctx context.Context, value string) (term uint64, err error)
	setValue(ctx context.Context, value string) error
	resign(ctx context.Context) error
}

// electionSetup is one implementation's election, set up on fresh
// clients under a fresh prefix.
type electionSetup struct {
	cands []candidate
	// queue is the etcd key prefix under which each campaigning candidate
	// has exactly one key, and cli a client to count them with.
	queue string
	cli   *clientv3.Client
	// prefix is the etcd prefix the implementation was given: the
	// backend's for ashlock, the election's for etcd.
	prefix string
}

// electionImpl makes an implementation's election with n candidates.
type electionImpl func(b *testing.B, n int) electionSetup

type ashlockCandidate struct {
	e *ashlock.Election
	g *ashlock.Guard
}

func (c *ashlockCandidate) campaign(ctx context.Context, value string) (uint64, error) {
	g, err := c.e.Campaign(ctx, []byte(value))
	if err != nil {
		return 0, err
	}
	c.g = g
	return g.FencingToken()
}

func (c *ashlockCandidate) setValue(ctx context.Context, value string) error {
	return c.g.SetValue(ctx, []byte(value))
}

func (c *ashlockCandidate) resign(ctx context.Context) error {
	g := c.g
	c.g = nil
	return g.Unlock(ctx)
}

// ashlockElection: n ashlock clients, each on its own etcd client, under
// one prefix, campaigning in the election electionName with electionTTL.
func ashlockElection(b *testing.B, n int) electionSetup {
	prefix := newPrefix("election")
	s := electionSetup{queue: prefix + "claims/", prefix: prefix}
	for i, cli := range contenderClients(b, nil, n) {
		if i == 0 {
			s.cli = cli
		}
		c, _ := newAshlock(b, cli, prefix)
		s.cands = append(s.cands, &ashlockCandidate{e: c.Election(electionName).WithTTL(electionTTL)})
	}
	return s
}

type etcdCandidate struct{ el *concurrency.Election }

func (c *etcdCandidate) campaign(ctx context.Context, value string) (uint64, error) {
	if err := c.el.Campaign(ctx, value); err != nil {
		return 0, err
	}
	return uint64(c.el.Rev()), nil
}

func (c *etcdCandidate) setValue(ctx context.Context, value string) error {
	return c.el.Proclaim(ctx, value)
}

func (c *etcdCandidate) resign(ctx context.Context) error { return c.el.Resign(ctx) }

// etcdElection: n etcd concurrency.Elections, each on a Session (TTL
// electionTTL) of its own etcd client.
func etcdElection(b *testing.B, n int) electionSetup {
	pfx := newPrefix("election") + electionName
	s := electionSetup{queue: pfx + "/", prefix: pfx}
	for i, cli := range contenderClients(b, nil, n) {
		if i == 0 {
			s.cli = cli
		}
		sess := newSession(b, cli, int(electionTTL/time.Second))
		s.cands = append(s.cands, &etcdCandidate{el: concurrency.NewElection(sess, pfx)})
	}
	return s
}

// namedElection is an implementation of an election benchmark and its name.
type namedElection struct {
	name  string
	setup electionImpl
}

// electionImpls are the implementations every election benchmark
// compares; ashlock first (BenchmarkElectionFailoverInterleaved's ratios
// divide the first's figures by the second's).
var electionImpls = []namedElection{
	{"ashlock", ashlockElection},
	{"etcd-election", etcdElection},
}

// queued waits until at least n candidates have a key in the election's
// queue, polling: it is only ever called in the untimed part of a trial,
// to know that a campaign started in the background is in line.
func (s electionSetup) queued(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, electionWait)
	defer cancel()
	for {
		resp, err := s.cli.Get(ctx, s.queue, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("counting the queue: %w", err)
		}
		if resp.Count >= int64(n) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fewer than %d candidates queued within %v", n, electionWait)
		case <-time.After(time.Millisecond):
		}
	}
}

// campaignResult is what a campaign run in the background returns, with
// the moment it returned.
type campaignResult struct {
	cand int
	term uint64
	at   time.Time
	err  error
}

// campaigns runs campaigns in the background and hands their results on.
type campaigns struct {
	ctx  context.Context
	res  chan campaignResult
	wg   sync.WaitGroup
	cand []candidate
}

func newCampaigns(ctx context.Context, cands []candidate) *campaigns {
	return &campaigns{ctx: ctx, res: make(chan campaignResult, len(cands)), cand: cands}
}

// start has candidate i campaign with value in the background.
func (c *campaigns) start(i int, value string) {
	c.wg.Go(func() {
		term, err := c.cand[i].campaign(c.ctx, value)
		c.res <- campaignResult{cand: i, term: term, at: time.Now(), err: err}
	})
}

// next waits for the next campaign to return; it must be candidate want's.
func (c *campaigns) next(want int) (campaignResult, error) {
	select {
	case r := <-c.res:
		if r.err != nil {
			return r, fmt.Errorf("candidate %d: campaign: %w", r.cand, r.err)
		}
		if r.cand != want {
			return r, fmt.Errorf("candidate %d elected, want %d (the next in line)", r.cand, want)
		}
		return r, nil
	case <-time.After(electionWait):
		return campaignResult{}, fmt.Errorf("no leader elected within %v", electionWait)
	case <-c.ctx.Done():
		return campaignResult{}, c.ctx.Err()
	}
}

// BenchmarkElectionFailover measures failover after a resignation: n
// candidates on clients of their own campaign in one election, one leads
// and the others wait in line; the leader resigns (ashlock: Guard.Unlock;
// etcd: concurrency.Election.Resign) and the time from just before that
// call to the return of the next candidate's Campaign is one trial. The
// resigner then campaigns again, at the back of the line, and once it is
// queued (untimed) the next trial starts. Metrics p50-ms, p99-ms and
// max-ms cover resignTrials trials per iteration, all iterations
// together; ns/op is the time of a whole iteration, waits for the queue
// included, and is not a figure of merit. Target: ashlock at most
// etcd-election.
//
// settle is how long the successor has been in line when its leader
// resigns: 0 (the resignation follows as soon as its key is in the
// queue, so its wait may not be fully set up yet: etcd's watch for a
// revision already reached is served by a resync every 100ms) or
// electionSettle (the usual case of a successor that has waited a while).
// With 8 candidates the successor joined the line 7 trials earlier.
func BenchmarkElectionFailover(b *testing.B) {
	for _, n := range candidateCounts {
		for _, settle := range []time.Duration{0, electionSettle} {
			b.Run(fmt.Sprintf("candidates=%d/settle=%v", n, settle), func(b *testing.B) {
				var impls []implBench
				for _, im := range electionImpls {
					impls = append(impls, implBench{im.name, func(b *testing.B) { benchResign(b, im.setup(b, n), settle) }})
				}
				runInTurn(b, impls)
			})
		}
	}
}

func benchResign(b *testing.B, s electionSetup, settle time.Duration) {
	ctx, cancel := context.WithCancel(runCtx(b))
	r := newResigns(ctx, s)
	defer func() {
		cancel() // ends the campaigns still waiting
		r.cs.wg.Wait()
	}()
	if err := r.fill(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(settle) // the scenario: a successor in line for this long
	var lat []time.Duration
	for b.Loop() {
		for range resignTrials {
			d, err := r.trial()
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, d)
			time.Sleep(settle)
		}
	}
	benchrun.ReportLatencies(b, "", lat)
}

// resigns runs the trials of BenchmarkElectionFailover on one election.
type resigns struct {
	ctx    context.Context
	s      electionSetup
	cs     *campaigns
	leader int
	seq    int
}

func newResigns(ctx context.Context, s electionSetup) *resigns {
	return &resigns{ctx: ctx, s: s, cs: newCampaigns(ctx, s.cands)}
}

func (r *resigns) value() string {
	r.seq++
	return fmt.Sprint("v", r.seq)
}

// fill elects candidate 0 and puts the others in line, in order.
func (r *resigns) fill() error {
	if _, err := r.s.cands[0].campaign(r.ctx, r.value()); err != nil {
		return err
	}
	for i := 1; i < len(r.s.cands); i++ {
		r.cs.start(i, r.value())
		if err := r.s.queued(r.ctx, i+1); err != nil {
			return err
		}
	}
	return nil
}

// trial has the leader resign and returns the time from just before the
// call to the return of its successor's Campaign; the resigner is back in
// line when it returns.
func (r *resigns) trial() (time.Duration, error) {
	n := len(r.s.cands)
	next := (r.leader + 1) % n
	start := time.Now()
	if err := r.s.cands[r.leader].resign(r.ctx); err != nil {
		return 0, fmt.Errorf("candidate %d: resign: %w", r.leader, err)
	}
	res, err := r.cs.next(next)
	if err != nil {
		return 0, err
	}
	r.cs.start(r.leader, r.value())
	if err := r.s.queued(r.ctx, n); err != nil {
		return 0, err
	}
	r.leader = next
	return res.at.Sub(start), nil
}

// BenchmarkElectionFailoverInterleaved is BenchmarkElectionFailover with
// settled successors, both implementations in one sub-benchmark taking
// turns trial by trial (which goes first alternates), so that on a busy
// machine both meet the same slow and fast stretches. After each pair of
// trials, electionSettle passes (untimed) before the next. Metrics:
// <impl>-p50-ms, <impl>-p99-ms and <impl>-max-ms over every trial of the
// run, and p50-ratio and p99-ratio, ashlock's divided by etcd-election's
// (target: at most 1).
func BenchmarkElectionFailoverInterleaved(b *testing.B) {
	for _, n := range candidateCounts {
		b.Run(fmt.Sprintf("candidates=%d", n), func(b *testing.B) {
			lat := interleavedResigns(b, n, electionImpls)
			for i, im := range electionImpls {
				benchrun.ReportLatencies(b, im.name+"-", lat[i])
			}
			for _, p := range []float64{0.50, 0.99} {
				b.ReportMetric(float64(benchrun.Percentile(lat[0], p))/float64(benchrun.Percentile(lat[1], p)), fmt.Sprintf("p%.0f-ratio", 100*p))
			}
		})
	}
}

// interleavedResigns runs the trials of BenchmarkElectionFailoverInterleaved
// for impls, each with n candidates, taking turns trial by trial (which
// goes first rotates), and returns each one's latencies.
func interleavedResigns(b *testing.B, n int, impls []namedElection) [][]time.Duration {
	ctx, cancel := context.WithCancel(runCtx(b))
	var rs []*resigns
	defer func() {
		cancel()
		for _, r := range rs {
			r.cs.wg.Wait()
		}
	}()
	// Every setup first: making clients compacts etcd's history, which
	// would fail an etcd Election still setting up its watch.
	for _, im := range impls {
		rs = append(rs, newResigns(ctx, im.setup(b, n)))
	}
	for _, r := range rs {
		if err := r.fill(); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(electionSettle)
	lat := make([][]time.Duration, len(rs))
	turn := 0
	for b.Loop() {
		for range resignTrials {
			for k := range rs {
				i := (turn + k) % len(rs)
				d, err := rs[i].trial()
				if err != nil {
					b.Fatalf("%s: %v", impls[i].name, err)
				}
				lat[i] = append(lat[i], d)
			}
			turn++
			time.Sleep(electionSettle)
		}
	}
	return lat
}
