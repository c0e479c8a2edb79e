package ashlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// Many candidates on several clients run Run on one election (and on a
// second one beside it): inside lead, never two at once per name, and the
// terms, in the order lead saw them, strictly increase.
func TestElectionRunOneLeaderAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		clients := make([]*ashlock.LockClient, 3)
		for i := range clients {
			c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{DefaultTTL: wdTTL, Logger: quiet}, b)
			require.NoError(t, err)
			defer c.Close(context.Background())
			clients[i] = c
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		type tally struct {
			inside atomic.Int32
			mu     sync.Mutex
			terms  []uint64
		}
		names := []string{"leader", "leader/x"}
		tallies := map[string]*tally{"leader": {}, "leader/x": {}}
		var overlaps atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := range 8 {
			name := names[i%2]
			tl := tallies[name]
			e := clients[i%3].Election(name).WithOwner(fmt.Sprint("candidate-", i))
			wg.Go(func() {
				errs <- e.Run(ctx, []byte{byte(i)}, func(ctx context.Context, token uint64) error {
					if tl.inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					tl.mu.Lock()
					tl.terms = append(tl.terms, token)
					n := len(tl.terms)
					tl.mu.Unlock()
					time.Sleep(10 * time.Millisecond) // hold the term a while (fake time)
					tl.inside.Add(-1)
					if n >= 40 {
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
		assert.Zero(t, overlaps.Load(), "two lead calls of one election ran at once")
		for name, tl := range tallies {
			require.GreaterOrEqual(t, len(tl.terms), 2, name)
			for i := 1; i < len(tl.terms); i++ {
				assert.Greater(t, tl.terms[i], tl.terms[i-1], "%s: term %d after %d", name, tl.terms[i], tl.terms[i-1])
			}
		}
	})
}

// Renewals failing: lead's context is cancelled, with cause
// ErrLeaseExpired, at the guard's local deadline; Run then campaigns again
// and leads a later term.
func TestElectionRunLeadCancelledAtLocalDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, b := bubbleClient(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var tokens []uint64
		var after time.Duration
		var cause error
		err := c.Election("e").Run(ctx, nil, func(lctx context.Context, token uint64) error {
			tokens = append(tokens, token)
			if len(tokens) == 2 {
				b.FailRenewals(nil)
				cancel()
				return nil
			}
			start := time.Now()
			b.FailRenewals(errInjected)
			<-lctx.Done()
			after, cause = time.Since(start), context.Cause(lctx)
			return lctx.Err()
		})
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, cause, ashlock.ErrLeaseExpired)
		assert.LessOrEqual(t, after, wdTTL-wdMargin, "cancelled after the local deadline")
		assert.Greater(t, after, wdTTL/2, "cancelled long before the local deadline")
		require.Len(t, tokens, 2)
		assert.Greater(t, tokens[1], tokens[0])
	})
}

// A lost term (the store expires the lease) cancels lead's context at once;
// Run does not call lead again before that call has returned, however long
// it ignores the cancellation, and then leads a later term.
func TestElectionRunNeverOverlapsItsLeadCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, b := bubbleClient(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var calls atomic.Int32
		release := make(chan struct{})
		lostCause := make(chan error, 1)
		done := make(chan error, 1)
		var second uint64
		var first uint64
		go func() {
			done <- c.Election("e").Run(ctx, nil, func(lctx context.Context, token uint64) error {
				if calls.Add(1) == 2 {
					second = token
					cancel()
					return nil
				}
				first = token
				<-lctx.Done()
				lostCause <- context.Cause(lctx)
				<-release // keeps going past the loss, as a stuck leader might
				return nil
			})
		}()
		synctest.Wait()
		require.Equal(t, int32(1), calls.Load())
		require.True(t, b.ExpireKey("e"))
		synctest.Wait()
		select {
		case cause := <-lostCause:
			assert.ErrorIs(t, cause, ashlock.ErrLeaseExpired)
		default:
			t.Fatal("lead's context not cancelled when the store expired the lease")
		}
		time.Sleep(5 * wdTTL)
		synctest.Wait()
		assert.Equal(t, int32(1), calls.Load(), "lead called again while the previous call runs")
		close(release)
		assert.ErrorIs(t, <-done, context.Canceled)
		assert.Equal(t, int32(2), calls.Load())
		assert.Greater(t, second, first)
	})
}

// lead failing while it leads: Run releases the term and returns the error.
func TestElectionRunReturnsLeadError(t *testing.T) {
	c := newClient(t, ashlock.LockConfig{}, nil)
	ctx := testCtx(t)
	e := c.Election("e")
	boom := errors.New("boom")
	err := e.Run(ctx, []byte("v"), func(context.Context, uint64) error { return boom })
	assert.ErrorIs(t, err, boom)
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, ashlock.ErrNoLeader, "Run kept the term after lead failed")
}

// lead returning nil: Run resigns and campaigns again at the back of the
// queue, so a candidate that was waiting leads before Run's next term.
func TestElectionRunCampaignsAgainAtTheBack(t *testing.T) {
	c := newClient(t, ashlock.LockConfig{}, nil)
	ctx := testCtx(t)
	e := c.Election("e")
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	rival := make(chan *ashlock.Guard, 1)
	rivalErr := make(chan error, 1)
	runCtx, cancel := context.WithCancel(ctx)
	calls := 0
	err := e.Run(runCtx, nil, func(_ context.Context, token uint64) error {
		calls++
		if calls == 2 {
			note("run")
			cancel()
			return nil
		}
		go func() {
			g, err := e.Campaign(ctx, []byte("rival"))
			note("rival")
			rivalErr <- err
			rival <- g
			if err == nil {
				_ = g.Unlock(ctx)
			}
		}()
		// Return once the rival is queued behind this term.
		for {
			info, err := c.Inspect(ctx, "e")
			if err != nil || len(info.Waiters) > 0 || ctx.Err() != nil {
				return err
			}
			time.Sleep(time.Millisecond) // polling a state nothing announces
		}
	})
	assert.ErrorIs(t, err, context.Canceled)
	require.NoError(t, <-rivalErr)
	<-rival
	assert.Equal(t, []string{"rival", "run"}, order)
}

// A campaign failing with ErrUnavailable is retried, logged at WARN; bad
// input and a closed client are returned at once.
func TestElectionRunRetriesUnavailableCampaigns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := &failingGrants{Backend: memory.New()}
		defer fb.Close()
		fb.fails.Store(3)
		logs := &logCapture{}
		c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{DefaultTTL: wdTTL, Logger: logs.logger()}, fb)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		var token uint64
		err = c.Election("e").Run(ctx, nil, func(_ context.Context, tk uint64) error {
			token = tk
			cancel()
			return nil
		})
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotZero(t, token, "lead never called")
		warned := 0
		for _, r := range logs.atLeast(t, slog.LevelWarn) {
			if r.str(slog.MessageKey) == "ashlock: campaign failed; retrying" && r.str("election") == "e" {
				warned++
			}
		}
		assert.Equal(t, 3, warned, "one WARN per failed campaign")

		lead := func(context.Context, uint64) error { t.Error("lead called"); return nil }
		assert.ErrorIs(t, c.Election("").Run(t.Context(), nil, lead), ashlock.ErrInvalidKey)
		assert.ErrorIs(t, c.Election("e").WithTTL(-1).Run(t.Context(), nil, lead), ashlock.ErrInvalidTTL)
		require.NoError(t, c.Close(context.Background()))
		assert.ErrorIs(t, c.Election("e").Run(t.Context(), nil, lead), ashlock.ErrClosed)
	})
}

// Closing the client while Run leads ends lead's context and Run returns
// ErrClosed.
func TestElectionRunEndsWithClose(t *testing.T) {
	b := memory.New()
	defer b.Close()
	c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{Logger: quiet}, b)
	require.NoError(t, err)
	ctx := testCtx(t)
	err = c.Election("e").Run(ctx, nil, func(lctx context.Context, _ uint64) error {
		go c.Close(context.Background())
		<-lctx.Done()
		assert.ErrorIs(t, context.Cause(lctx), ashlock.ErrUnlocked)
		return nil
	})
	assert.ErrorIs(t, err, ashlock.ErrClosed)
}

// A Campaign whose context ends while it waits leaves nothing queued, and
// a later resignation leaves no leader.
func TestElectionCancelledCampaignLeavesNothing(t *testing.T) {
	c := newClient(t, ashlock.LockConfig{}, nil)
	ctx := testCtx(t)
	e := c.Election("e")
	g, err := e.Campaign(ctx, []byte("a"))
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = e.Campaign(short, []byte("b"))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	info, err := c.Inspect(ctx, "e")
	require.NoError(t, err)
	assert.Empty(t, info.Waiters, "the cancelled campaign is still queued")
	require.NoError(t, g.Unlock(ctx))
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, ashlock.ErrNoLeader)
}

func TestElectionLeader(t *testing.T) {
	c := newClient(t, ashlock.LockConfig{}, nil)
	ctx := testCtx(t)
	e := c.Election("e").WithOwner("node-1")
	_, err := e.Leader(ctx)
	require.ErrorIs(t, err, ashlock.ErrNoLeader)
	g, err := e.Campaign(ctx, []byte("10.0.0.1"))
	require.NoError(t, err)
	token, err := g.FencingToken()
	require.NoError(t, err)
	l, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "e", l.Name)
	assert.Equal(t, []byte("10.0.0.1"), l.Value)
	assert.Equal(t, "node-1", l.Owner)
	assert.Equal(t, token, l.Token)
	assert.False(t, l.Since.IsZero())
	_, err = c.Election("").Leader(ctx)
	assert.ErrorIs(t, err, ashlock.ErrInvalidKey)
}

// failingGrants is a memory backend whose next fails Grants fail with
// ErrUnavailable.
type failingGrants struct {
	*memory.Backend
	fails atomic.Int32
}

func (f *failingGrants) Grant(ctx context.Context, ttl time.Duration) (backend.Lease, error) {
	if f.fails.Add(-1) >= 0 {
		return backend.Lease{}, fmt.Errorf("%w: injected", backend.ErrUnavailable)
	}
	return f.Backend.Grant(ctx, ttl)
}
