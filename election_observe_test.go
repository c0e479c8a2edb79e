package ashlock_test

import (
	"context"
	"iter"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// observed is what one observer yielded, collected by a goroutine.
type observed struct {
	leaders chan ashlock.Leader
	errs    chan error
	done    chan struct{}
}

// observe runs e.Observe(ctx) in a goroutine of its own and collects.
func observe(ctx context.Context, e *ashlock.Election) *observed {
	o := &observed{leaders: make(chan ashlock.Leader, 100), errs: make(chan error, 100), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for l, err := range e.Observe(ctx) {
			if err != nil {
				o.errs <- err
				continue
			}
			o.leaders <- l
		}
	}()
	return o
}

// next returns the next state yielded; inside a bubble, after everything
// has settled.
func (o *observed) next(t *testing.T) ashlock.Leader {
	t.Helper()
	synctest.Wait()
	select {
	case l := <-o.leaders:
		return l
	default:
		t.Fatal("observer yielded nothing")
		return ashlock.Leader{}
	}
}

// none checks that nothing more was yielded.
func (o *observed) none(t *testing.T) {
	t.Helper()
	synctest.Wait()
	select {
	case l := <-o.leaders:
		t.Errorf("observer yielded %+v, want nothing", l)
	case err := <-o.errs:
		t.Errorf("observer yielded error %v, want nothing", err)
	default:
	}
}

// Observe sees the current leader first, value changes, a new term, and
// "no leader"; waiters alone change nothing it reports; a later observer
// starts from the current state; ctx's end ends it without an error.
func TestElectionObserveSeesEveryChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := bubbleClient(t)
		ctx := t.Context()
		e := c.Election("e").WithOwner("a")
		ga, err := e.Campaign(ctx, []byte("a1"))
		require.NoError(t, err)
		ta, _ := ga.FencingToken()

		octx, stop := context.WithCancel(ctx)
		o := observe(octx, c.Election("e"))
		l := o.next(t)
		assert.Equal(t, ashlock.Leader{Name: "e", Value: []byte("a1"), Owner: "a", Token: ta, Since: l.Since}, l)
		assert.False(t, l.Since.IsZero())

		require.NoError(t, ga.SetValue(ctx, []byte("a2")))
		l = o.next(t)
		assert.Equal(t, ta, l.Token)
		assert.Equal(t, []byte("a2"), l.Value)

		// A rival queues: not a change of leader.
		won := make(chan *ashlock.Guard, 1)
		go func() {
			g, err := c.Election("e").WithOwner("b").Campaign(ctx, []byte("b1"))
			assert.NoError(t, err)
			won <- g
		}()
		o.none(t)

		// A second observer on the same client starts from the current state.
		o2 := observe(octx, c.Election("e"))
		assert.Equal(t, []byte("a2"), o2.next(t).Value)

		require.NoError(t, ga.Unlock(ctx))
		gb := <-won
		tb, _ := gb.FencingToken()
		for _, ob := range []*observed{o, o2} {
			l = ob.next(t)
			assert.Equal(t, "b", l.Owner)
			assert.Equal(t, tb, l.Token)
			assert.Greater(t, l.Token, ta)
		}

		require.NoError(t, gb.Unlock(ctx))
		for _, ob := range []*observed{o, o2} {
			assert.Equal(t, ashlock.Leader{Name: "e"}, ob.next(t))
			ob.none(t)
		}
		stop()
		<-o.done
		<-o2.done
		assert.Empty(t, o.errs, "an error after ctx ended")
	})
}

// Observe of a free election yields a zero Leader (with its name) first.
func TestElectionObserveNoLeaderFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, b := bubbleClient(t)
		octx, stop := context.WithCancel(t.Context())
		defer stop()
		o := observe(octx, c.Election("e"))
		assert.Equal(t, ashlock.Leader{Name: "e"}, o.next(t))
		g, err := c.Election("e").Campaign(t.Context(), nil)
		require.NoError(t, err)
		tk, _ := g.FencingToken()
		assert.Equal(t, tk, o.next(t).Token)
		// The store ends the term: "no leader".
		require.True(t, b.ExpireKey("e"))
		assert.Equal(t, ashlock.Leader{Name: "e"}, o.next(t))
		stop()
		<-o.done
	})
}

// Closing the client makes each observer yield ErrClosed once and end;
// closing a backend the client does not own does the same; Observe on a
// closed client yields ErrClosed at once.
func TestElectionObserveEndsWithClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := bubbleClient(t)
		o := observe(t.Context(), c.Election("e"))
		o.next(t)
		require.NoError(t, c.Close(context.Background()))
		<-o.done
		require.Len(t, o.errs, 1)
		assert.ErrorIs(t, <-o.errs, ashlock.ErrClosed)

		again := observe(t.Context(), c.Election("e"))
		<-again.done
		require.Len(t, again.errs, 1)
		assert.ErrorIs(t, <-again.errs, ashlock.ErrClosed)
		assert.Empty(t, again.leaders)
	})
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{Logger: quiet}, b)
		require.NoError(t, err)
		defer c.Close(context.Background())
		o := observe(t.Context(), c.Election("e"))
		o.next(t)
		require.NoError(t, b.Close())
		<-o.done
		require.Len(t, o.errs, 1)
		assert.ErrorIs(t, <-o.errs, ashlock.ErrClosed)
	})
}

// An invalid name is refused.
func TestElectionObserveInvalidName(t *testing.T) {
	c := newClient(t, ashlock.LockConfig{}, nil)
	for _, err := range c.Election("").Observe(testCtx(t)) {
		assert.ErrorIs(t, err, ashlock.ErrInvalidKey)
	}
}

// Breaking out of the loop ends the observation; another can start again.
func TestElectionObserveBreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := bubbleClient(t)
		for range 3 {
			n := 0
			for _, err := range c.Election("e").Observe(t.Context()) {
				require.NoError(t, err)
				n++
				break
			}
			assert.Equal(t, 1, n)
		}
	})
}

// countingObserver counts the backend observations a client starts.
type countingObserver struct {
	*memory.Backend
	n atomic.Int32
}

func (c *countingObserver) Observe(ctx context.Context, key string) iter.Seq2[backend.LockInfo, error] {
	c.n.Add(1)
	return c.Backend.Observe(ctx, key)
}

// However many observers a client runs on one election, it makes one
// backend observation for them; once all have left, the next makes a new
// one.
func TestElectionObserversShareOneBackendObservation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cb := &countingObserver{Backend: memory.New()}
		defer cb.Close()
		c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{Logger: quiet}, cb)
		require.NoError(t, err)
		defer c.Close(context.Background())
		ctx, stop := context.WithCancel(t.Context())
		var obs []*observed
		for range 10 {
			o := observe(ctx, c.Election("e"))
			o.next(t)
			obs = append(obs, o)
		}
		other := observe(ctx, c.Election("f"))
		other.next(t)
		assert.Equal(t, int32(2), cb.n.Load(), "backend observations for 10 observers of one election and 1 of another")
		stop()
		for _, o := range append(obs, other) {
			<-o.done
		}
		synctest.Wait()
		o := observe(t.Context(), c.Election("e"))
		o.next(t)
		assert.Equal(t, int32(3), cb.n.Load())
		require.NoError(t, c.Close(context.Background()))
		<-o.done
	})
}
