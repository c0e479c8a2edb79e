package redisbackend

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An enqueue run again under the same claim ID (a client resending a
// command whose reply it lost) finds the claim its first run added, which
// keeps its place and token and waits for the claim ahead: both when the
// claim is still last (a joining exclusive claim's listing, the claim just
// ahead, then holds the claim itself, not the holder) and when another
// claim has joined behind it since (the listing then holds neither).
func TestRerunEnqueueFindsItsClaim(t *testing.T) {
	for _, behind := range []bool{false, true} {
		t.Run(fmt.Sprint("behind=", behind), func(t *testing.T) {
			ctx := ctxFor(t)
			b, rc, prefix := newBackend(t)
			l := grant(t, b, time.Minute)
			warm(t, b, l)

			rerun := &rerunEnqueue{owner: "L", ran: make(chan struct{}), resume: make(chan struct{})}
			lb := hookedBackend(ctx, t, prefix, rerun)

			holder, err := b.Acquire(ctx, request("rerun", l, "H"))
			require.NoError(t, err)
			lp := startAcquire(t, lb, request("rerun", l, "L"))
			select {
			case <-rerun.ran:
			case <-time.After(10 * time.Second):
				t.Fatal("the enqueue did not run")
			}
			info, err := b.Inspect(ctx, "rerun")
			require.NoError(t, err)
			require.Len(t, info.Waiters, 1)
			first := info.Waiters[0].Token
			owners := []string{"L"}
			var wp *pending
			if behind {
				wp = startAcquire(t, b, request("rerun", l, "W"))
				awaitWaiting(t, b, "rerun", 2)
				owners = append(owners, "W")
			}
			close(rerun.resume)

			// L waits for the holder (and W, if there, for L): it has
			// subscribed to the holder's channel and holds nothing.
			want := map[string]int64{fmt.Sprintf("{%s}e:%d", prefix, holder.Token): 1}
			if behind {
				want[fmt.Sprintf("{%s}e:%d", prefix, first)] = 1
			}
			awaitChannels(t, rc, prefix, want)
			require.True(t, rerun.done(), "the enqueue did not run again")
			info, err = b.Inspect(ctx, "rerun")
			require.NoError(t, err)
			assert.Equal(t, holder.Token, info.Token)
			var got []string
			for _, w := range info.Waiters {
				got = append(got, w.Owner)
			}
			require.Equal(t, owners, got)
			assert.Equal(t, first, info.Waiters[0].Token, "the rerun moved L's claim")

			require.NoError(t, b.Release(ctx, holder))
			lc := lp.await(t)
			assert.Equal(t, first, lc.Token)
			if behind {
				select {
				case <-wp.done:
					t.Fatalf("W took the key before L released it: %v", wp.err)
				default:
				}
			}
			require.NoError(t, lb.Release(ctx, lc))
			if behind {
				require.NoError(t, b.Release(ctx, wp.await(t)))
			}
			onlyCounters(t, rc, prefix, l.ID)
		})
	}
}

// rerunEnqueue runs the enqueue of the claim of owner, then, once resume
// is closed, runs it again and returns the second reply, as go-redis does
// when it retries a command whose reply it lost.
type rerunEnqueue struct {
	processOnly
	owner       string
	ran, resume chan struct{}
	once        sync.Once
	mu          sync.Mutex
	twice       bool
}

func (r *rerunEnqueue) done() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.twice
}

func (r *rerunEnqueue) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		args := cmd.Args()
		// evalsha sha 1 token-key, then ARGV: tag, id, lease, permits,
		// shared, mode, permit, owner, ...
		if len(args) < 12 || args[9] != "fair" || args[11] != r.owner {
			return next(ctx, cmd)
		}
		first := false
		r.once.Do(func() { first = true })
		if !first {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		close(r.ran)
		select {
		case <-r.resume:
		case <-time.After(10 * time.Second):
			return context.DeadlineExceeded
		}
		err := next(ctx, cmd)
		r.mu.Lock()
		r.twice = true
		r.mu.Unlock()
		return err
	}
}
