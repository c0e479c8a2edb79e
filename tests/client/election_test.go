package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// Candidates on three clients run Run on one election: never two lead calls
// at once, and the terms strictly increase in the order they led.
func TestElectionOneLeaderAtATimeOnEtcd(t *testing.T) {
	prefix := uniquePrefix(t)
	clients := make([]*ashlock.LockClient, 3)
	for i := range clients {
		clients[i] = connect(t, shared, prefix, ashlock.LockConfig{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitBound)
	defer cancel()
	var inside, overlaps atomic.Int32
	var mu sync.Mutex
	var terms []uint64
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		e := clients[i%3].Election("leader").WithOwner(fmt.Sprint("candidate-", i))
		wg.Go(func() {
			errs <- e.Run(ctx, []byte{byte(i)}, func(lctx context.Context, token uint64) error {
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				terms = append(terms, token)
				n := len(terms)
				mu.Unlock()
				inside.Add(-1)
				if n >= 30 {
					cancel()
				}
				return nil
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.ErrorIs(t, err, context.Canceled)
	}
	assert.Zero(t, overlaps.Load(), "two lead calls ran at once")
	require.GreaterOrEqual(t, len(terms), 30)
	for i := 1; i < len(terms); i++ {
		assert.Greater(t, terms[i], terms[i-1], "term %d after %d", terms[i], terms[i-1])
	}
}

// claimOfToken returns the etcd key and lease of the claim made at token.
func claimOfToken(t *testing.T, cli *clientv3.Client, prefix string, token uint64) (string, clientv3.LeaseID) {
	t.Helper()
	resp, err := cli.Get(testCtx(t), prefix, clientv3.WithPrefix())
	require.NoError(t, err)
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == int64(token) {
			return string(kv.Key), clientv3.LeaseID(kv.Lease)
		}
	}
	t.Fatalf("no claim with token %d under %s", token, prefix)
	return "", 0
}

// An operator's revoke of the leader's lease cancels lead's context
// promptly, with cause ErrLeaseExpired, long before the next renewal; Run
// then leads a later term, and an observer sees the loss and the new term.
func TestElectionRevokeCancelsLeadPromptly(t *testing.T) {
	prefix := uniquePrefix(t)
	cli := shared.Client(t)
	c := connect(t, shared, prefix, ashlock.LockConfig{DefaultTTL: 30 * time.Second})
	e := c.Election("e")
	octx, stopObs := context.WithCancel(context.Background())
	defer stopObs()
	obs := observeAll(octx, e)

	ctx, cancel := context.WithTimeout(context.Background(), 3*waitBound)
	defer cancel()
	var tokens []uint64
	var took time.Duration
	var cause error
	err := e.Run(ctx, []byte("v"), func(lctx context.Context, token uint64) error {
		tokens = append(tokens, token)
		if len(tokens) == 2 {
			cancel()
			return nil
		}
		_, lease := claimOfToken(t, cli, prefix, token)
		start := time.Now()
		if _, err := cli.Revoke(testCtx(t), lease); err != nil {
			return err
		}
		select {
		case <-lctx.Done():
			took, cause = time.Since(start), context.Cause(lctx)
		case <-time.After(5 * time.Second):
			t.Error("lead's context not cancelled within 5s of a revoke (renewals are 10s apart)")
		}
		return nil
	})
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, cause, ashlock.ErrLeaseExpired)
	t.Logf("lead's context cancelled %v after the revoke", took)
	require.Len(t, tokens, 2)
	assert.Greater(t, tokens[1], tokens[0])
	// The observer saw term 1, its end or term 2 directly, and term 2.
	obs.awaitToken(t, tokens[1])
	obs.check(t)
}

// With etcd stopped, lead's context is cancelled at the conservative local
// deadline (before the lease can have expired on the server), campaigns
// are retried while etcd is down, and after a restart Run leads a later
// term; an observer running throughout sees it.
func TestElectionLocalDeadlineWhileEtcdIsDown(t *testing.T) {
	c := etcdtest.Start(t)
	prefix := uniquePrefix(t)
	lc := connect(t, c, prefix, ashlock.LockConfig{})
	e := lc.Election("e").WithTTL(3 * time.Second)
	octx, stopObs := context.WithCancel(context.Background())
	defer stopObs()
	obs := observeAll(octx, e)

	ctx, cancel := context.WithTimeout(context.Background(), 6*waitBound)
	defer cancel()
	var tokens []uint64
	var took time.Duration
	var cause error
	restarted := make(chan struct{})
	err := e.Run(ctx, nil, func(lctx context.Context, token uint64) error {
		tokens = append(tokens, token)
		if len(tokens) == 2 {
			cancel()
			return nil
		}
		start := time.Now()
		c.StopMember(0)
		select {
		case <-lctx.Done():
			took, cause = time.Since(start), context.Cause(lctx)
		case <-time.After(waitBound):
			t.Error("lead's context not cancelled within 10s of etcd stopping (TTL 3s)")
		}
		go func() {
			defer close(restarted)
			rctx, rcancel := context.WithTimeout(context.Background(), etcdtest.StartTimeout)
			defer rcancel()
			if err := c.RestartMember(rctx, 0); err != nil {
				t.Errorf("restart: %v", err)
			}
		}()
		return nil
	})
	if len(tokens) > 0 {
		<-restarted
	}
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, cause, ashlock.ErrLeaseExpired)
	assert.Less(t, took, 3*time.Second, "cancelled after the lease could have expired")
	require.Len(t, tokens, 2)
	assert.Greater(t, tokens[1], tokens[0])
	obs.awaitToken(t, tokens[1])
	obs.check(t)
}

// A Campaign cancelled while it waits leaves no claim in etcd; Run returns
// lead's error after releasing the term.
func TestElectionCampaignCancelAndLeadErrorOnEtcd(t *testing.T) {
	prefix := uniquePrefix(t)
	cli := shared.Client(t)
	c := connect(t, shared, prefix, ashlock.LockConfig{})
	ctx := testCtx(t)
	e := c.Election("e")
	g, err := e.Campaign(ctx, []byte("a"))
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = e.Campaign(short, []byte("b"))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, int64(1), keysUnder(t, cli, prefix+"claims/"), "the cancelled campaign left its claim")
	require.NoError(t, g.Unlock(ctx))

	boom := errors.New("boom")
	assert.ErrorIs(t, e.Run(ctx, nil, func(context.Context, uint64) error { return boom }), boom)
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, ashlock.ErrNoLeader)
	assert.Zero(t, keysUnder(t, cli, prefix+"claims/"))
}

// Observe on etcd: the current leader first, a value change, a new term,
// "no leader"; two observers on one client see the same.
func TestElectionObserveOnEtcd(t *testing.T) {
	prefix := uniquePrefix(t)
	c := connect(t, shared, prefix, ashlock.LockConfig{})
	ctx := testCtx(t)
	e := c.Election("e")
	ga, err := e.WithOwner("a").Campaign(ctx, []byte("a1"))
	require.NoError(t, err)
	ta, _ := ga.FencingToken()

	octx, stop := context.WithCancel(context.Background())
	defer stop()
	o1, o2 := observeAll(octx, e), observeAll(octx, e)
	for _, o := range []*allObserved{o1, o2} {
		o.await(t, func(l ashlock.Leader) bool { return l.Token == ta && string(l.Value) == "a1" && l.Owner == "a" })
	}
	require.NoError(t, ga.SetValue(ctx, []byte("a2")))
	won := make(chan *ashlock.Guard, 1)
	go func() {
		g, err := e.WithOwner("b").Campaign(ctx, []byte("b1"))
		assert.NoError(t, err)
		won <- g
	}()
	waitWaiters(t, c, prefix, "e", 1)
	require.NoError(t, ga.Unlock(ctx))
	gb := <-won
	tb, _ := gb.FencingToken()
	require.NoError(t, gb.Unlock(ctx))
	for _, o := range []*allObserved{o1, o2} {
		o.await(t, func(l ashlock.Leader) bool { return l.Token == 0 })
		got := o.snapshot()
		want := []string{fmt.Sprintf("%d a1 a", ta), fmt.Sprintf("%d a2 a", ta), fmt.Sprintf("%d b1 b", tb), "0  "}
		var have []string
		for _, l := range got {
			have = append(have, fmt.Sprintf("%d %s %s", l.Token, l.Value, l.Owner))
		}
		assert.Equal(t, want, have)
		o.check(t)
	}
	stop()
	for _, o := range []*allObserved{o1, o2} {
		<-o.done
		assert.Empty(t, o.errors(), "errors after ctx ended")
	}
}

// allObserved records every state an Observe yields.
type allObserved struct {
	mu      sync.Mutex
	leaders []ashlock.Leader
	errs    []error
	changed chan struct{}
	done    chan struct{}
}

func observeAll(ctx context.Context, e *ashlock.Election) *allObserved {
	o := &allObserved{changed: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for l, err := range e.Observe(ctx) {
			o.mu.Lock()
			if err != nil {
				o.errs = append(o.errs, err)
			} else {
				o.leaders = append(o.leaders, l)
			}
			o.mu.Unlock()
			select {
			case o.changed <- struct{}{}:
			default:
			}
		}
	}()
	return o
}

func (o *allObserved) snapshot() []ashlock.Leader {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]ashlock.Leader(nil), o.leaders...)
}

func (o *allObserved) errors() []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]error(nil), o.errs...)
}

// await waits until some state yielded satisfies ok.
func (o *allObserved) await(t *testing.T, ok func(ashlock.Leader) bool) {
	t.Helper()
	deadline := time.After(3 * waitBound)
	for {
		for _, l := range o.snapshot() {
			if ok(l) {
				return
			}
		}
		select {
		case <-o.changed:
		case <-deadline:
			t.Fatalf("observer never yielded the state awaited; got %+v, errors %v", o.snapshot(), o.errors())
		}
	}
}

func (o *allObserved) awaitToken(t *testing.T, token uint64) {
	t.Helper()
	o.await(t, func(l ashlock.Leader) bool { return l.Token == token })
}

// check: every state names the election, no state repeats the one before
// it, and terms never go backwards.
func (o *allObserved) check(t *testing.T) {
	t.Helper()
	var maxTok uint64
	var prev *ashlock.Leader
	for i, l := range o.snapshot() {
		assert.Equal(t, "e", l.Name)
		if l.Token != 0 {
			assert.GreaterOrEqual(t, l.Token, maxTok, "state %d went backwards", i)
			maxTok = max(maxTok, l.Token)
		}
		if prev != nil {
			assert.False(t, prev.Token == l.Token && string(prev.Value) == string(l.Value) && prev.Owner == l.Owner,
				"state %d repeats the one before: %+v", i, l)
		}
		prev = &l
	}
}
