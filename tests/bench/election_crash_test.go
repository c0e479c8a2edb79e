package bench_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/etcd"
	"github.com/ash-lock/ashlock/fencing"
	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// crashTrials is how many crashed leaders one iteration of
// BenchmarkElectionCrash measures. Each trial lasts about a TTL.
const crashTrials = 10

// The leader process of BenchmarkElectionCrash is this test binary run
// again with these variables set (see crashChild).
const (
	crashChildEnv    = "ASHLOCK_BENCH_ELECTION_LEADER" // the implementation: ashlock or etcd-election
	crashEndpointEnv = "ASHLOCK_BENCH_ELECTION_ENDPOINT"
	crashPrefixEnv   = "ASHLOCK_BENCH_ELECTION_PREFIX"
	// crashTermLine prefixes the line on which the child reports its term
	// once it leads.
	crashTermLine = "term "
)

// crashResource is the resource both terms of a trial write to.
const crashResource = "register"

// BenchmarkElectionCrash measures failover after the leader's process is
// killed: a leader campaigns in a child process (this test binary again,
// see crashChild) and reports its term, a candidate in this
// process campaigns behind it, and once its key is in line and
// electionSettle has passed, and then a random time up to electionTTL
// (untimed, so that the crash falls anywhere in the leader's renewal
// cycle), the child gets SIGKILL. The time
// from just before the kill to the return of the candidate's Campaign is
// one trial: the old lease must expire, since nobody resigns. Both
// implementations lease for electionTTL and renew every electionRenewal,
// so the bound is the same: bound-ms, TTL plus one renewal interval.
// Metrics: p50-ms, p99-ms and max-ms over every trial of the run, and
// p99/bound and max/bound, the target being at most 1 (reported, not
// asserted).
//
// Each trial also plays a fenced resource (a fencing.Fence): the old
// leader's term is admitted before the kill (its writes), the new
// leader's once its Campaign has returned, and then the old term must be
// refused. stale-admitted counts old terms admitted after that (the
// benchmark fails if any is); terms must also increase.
func BenchmarkElectionCrash(b *testing.B) {
	var impls []implBench
	for _, im := range electionImpls {
		impls = append(impls, implBench{im.name, func(b *testing.B) { benchCrash(b, im.name, im.setup) }})
	}
	runInTurn(b, impls)
}

func benchCrash(b *testing.B, impl string, setup electionImpl) {
	ctx, cancel := context.WithCancel(runCtx(b))
	s := setup(b, 1)
	cs := newCampaigns(ctx, s.cands)
	defer func() {
		cancel()
		cs.wg.Wait()
	}()
	endpoint := server.endpoints(b)[0]
	bound := electionTTL + electionRenewal
	fence := new(fencing.Fence)
	var lat []time.Duration
	stale := 0
	for b.Loop() {
		for range crashTrials {
			d, admitted, err := crashTrial(ctx, s, cs, fence, impl, endpoint)
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, d)
			if admitted {
				stale++
			}
		}
	}
	benchrun.ReportLatencies(b, "", lat)
	b.ReportMetric(benchrun.Millis(bound), "bound-ms")
	b.ReportMetric(float64(benchrun.Percentile(lat, 0.99))/float64(bound), "p99/bound")
	b.ReportMetric(float64(benchrun.Percentile(lat, 1))/float64(bound), "max/bound")
	b.ReportMetric(float64(stale), "stale-admitted")
	if stale > 0 {
		b.Errorf("%d of %d old terms admitted by the fence after the new leader's", stale, len(lat))
	}
}

// crashTrial runs one trial: it returns the failover time and whether the
// fence admitted the old term after the new one.
func crashTrial(ctx context.Context, s electionSetup, cs *campaigns, fence *fencing.Fence, impl, endpoint string) (time.Duration, bool, error) {
	child, err := startLeader(ctx, impl, endpoint, s.prefix)
	if err != nil {
		return 0, false, err
	}
	defer child.reap()
	if err := fence.Admit(crashResource, child.term); err != nil {
		return 0, false, fmt.Errorf("the leader's term %d refused before the crash: %w", child.term, err)
	}
	cs.start(0, "successor")
	if err := s.queued(ctx, 2); err != nil {
		return 0, false, err
	}
	// The scenario: a successor in line for a while, and a crash at a
	// random point of the leader's renewal cycle.
	time.Sleep(electionSettle + rand.N(electionTTL))
	start := time.Now()
	if err := child.cmd.Process.Kill(); err != nil {
		return 0, false, fmt.Errorf("killing the leader: %w", err)
	}
	r, err := cs.next(0)
	if err != nil {
		return 0, false, err
	}
	d := r.at.Sub(start)
	if r.term <= child.term {
		return 0, false, fmt.Errorf("new term %d not above the crashed leader's %d", r.term, child.term)
	}
	if err := fence.Admit(crashResource, r.term); err != nil {
		return 0, false, fmt.Errorf("the new term %d refused: %w", r.term, err)
	}
	err = fence.Admit(crashResource, child.term)
	if err != nil && !errors.Is(err, fencing.ErrStaleToken) {
		return 0, false, err
	}
	if err := s.cands[0].resign(ctx); err != nil {
		return 0, false, fmt.Errorf("resign after the trial: %w", err)
	}
	return d, err == nil, nil
}

// leaderChild is a leader in a child process.
type leaderChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	term  uint64
}

// startLeader starts a child that campaigns in the election under prefix
// and waits until it reports that it leads.
func startLeader(ctx context.Context, impl, endpoint, prefix string) (*leaderChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), crashChildEnv+"="+impl, crashEndpointEnv+"="+endpoint, crashPrefixEnv+"="+prefix)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &leaderChild{cmd: cmd, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), crashTermLine) {
				line <- sc.Text()
				break
			}
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l, ok := <-line:
		if ok {
			c.term, err = strconv.ParseUint(strings.TrimPrefix(l, crashTermLine), 10, 64)
			if err == nil {
				return c, nil
			}
		}
		c.reap()
		return nil, fmt.Errorf("leader child: no term reported (%q, %v)", l, err)
	case <-time.After(electionWait):
		c.reap()
		return nil, fmt.Errorf("leader child: not leading within %v", electionWait)
	}
}

// reap kills the child if it still runs and waits for it.
func (c *leaderChild) reap() {
	_ = c.cmd.Process.Kill()
	_ = c.stdin.Close()
	_ = c.cmd.Wait()
}

// crashChild is the leader process of BenchmarkElectionCrash: this test
// binary run again with crashChildEnv set (see TestMain). It campaigns,
// reports its term on stdout, and leads until it is killed; if the
// benchmark goes away first (stdin closes) it exits without a word, like a
// crash. It returns the exit code of a failure before it leads.
func crashChild(impl string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "election leader:", err); return 2 }
	ctx, cancel := context.WithTimeout(context.Background(), electionWait)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{os.Getenv(crashEndpointEnv)},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return fail(err)
	}
	prefix := os.Getenv(crashPrefixEnv)
	var term uint64
	var keep any // what must stay reachable while leading
	switch impl {
	case "ashlock":
		be, err := etcd.New(cli, etcd.WithPrefix(prefix))
		if err != nil {
			return fail(err)
		}
		c, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{Logger: quiet}, be)
		if err != nil {
			return fail(err)
		}
		g, err := c.Election(electionName).WithTTL(electionTTL).Campaign(ctx, []byte("crashing"))
		if err != nil {
			return fail(err)
		}
		if term, err = g.FencingToken(); err != nil {
			return fail(err)
		}
		keep = g // a guard that becomes unreachable is released
	case "etcd-election":
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(electionTTL/time.Second)))
		if err != nil {
			return fail(err)
		}
		el := concurrency.NewElection(sess, prefix)
		if err := el.Campaign(ctx, "crashing"); err != nil {
			return fail(err)
		}
		term, keep = uint64(el.Rev()), el
	default:
		return fail(fmt.Errorf("unknown implementation %q", impl))
	}
	fmt.Printf("%s%d\n", crashTermLine, term)
	_, _ = io.Copy(io.Discard, os.Stdin)
	runtime.KeepAlive(keep)
	return 1 // the benchmark is gone: leave without a word, like a crash
}
