package redisbackend

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	redisb "github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// A release wakes only the next waiter: each handoff costs the same few
// requests however many wait, and nobody polls while they wait; whether
// the waiters' claims are named by the caller (each waiter subscribes to
// the claim ahead and reads once its subscription is confirmed) or by the
// Backend (told on the Backend's own channel, which all of them share
// here: each removal still wakes the one claim behind).
func TestHandoffCostIsConstant(t *testing.T) {
	for _, tc := range []struct {
		name    string
		req     func(key string, l backend.Lease, owner string) backend.AcquireRequest
		reads   int64   // requests per waiter while it queues
		perHand float64 // the bound on requests per handoff
	}{
		// Each waiter subscribes to the claim ahead and reads once; a
		// handoff is the release alone (the waiter holds on hearing it,
		// and the release records when), the bound looser.
		{"caller-named", request, 2, 3.5},
		// Each waiter sends its enqueue alone; a handoff is the release.
		{"backend-named", named, 1, 1.5},
	} {
		for _, waiters := range []int{4, 32} {
			t.Run(fmt.Sprint(tc.name, " ", waiters, " waiters"), func(t *testing.T) {
				handoffCost(t, tc.req, waiters, tc.reads, tc.perHand)
			})
		}
	}
}

// handoffCost queues waiters on one Backend behind a holder, with claims
// made by req, and checks the requests sent while they wait (reads per
// waiter, none after) and per handoff (at most perHand).
func handoffCost(t *testing.T, req func(key string, l backend.Lease, owner string) backend.AcquireRequest,
	waiters int, reads int64, perHand float64) {
	ctx := ctxFor(t)
	var calls atomic.Int64
	rc := srv.Client()
	defer rc.Close()
	rc.AddHook(countCalls{n: &calls})
	prefix := redistest.Prefix()
	b, err := redisb.New(ctx, rc, redisb.WithPrefix(prefix))
	require.NoError(t, err)
	defer b.Close()
	l := grant(t, b, time.Minute)

	// Load every script once (go-redis sends EVAL after a NOSCRIPT).
	warm, err := b.Acquire(ctx, req("warm-up", l, "H"))
	require.NoError(t, err)
	next := startAcquire(t, b, req("warm-up", l, "W"))
	awaitWaiting(t, b, "warm-up", 1)
	require.NoError(t, b.Release(ctx, warm))
	require.NoError(t, b.Release(ctx, next.await(t)))

	// Inspected through a Backend of its own, so that calls counts
	// the waiters' requests alone.
	inspector, _, _ := newBackendPrefix(t, prefix)
	holder, err := b.Acquire(ctx, req("handoff", l, "H"))
	require.NoError(t, err)
	queued := calls.Load()
	ps := make([]*pending, waiters)
	for i := range ps {
		ps[i] = startAcquire(t, b, req("handoff", l, fmt.Sprint("W", i)))
		awaitWaiting(t, inspector, "handoff", i+1)
	}
	// Each waiter sends its enqueue and, told by a claim channel,
	// one read once the server has confirmed its subscription.
	awaitCalls(t, &calls, queued+reads*int64(waiters))

	idle := calls.Load()
	time.Sleep(200 * time.Millisecond) // a window in which pollers would show
	// A poller would send at least one request per waiter here. One
	// read may still land in the window: a waiter whose read an
	// event crossed reads once more, and its second read can come
	// after the count above was reached.
	assert.LessOrEqual(t, calls.Load()-idle, int64(1), "requests while everyone waits")

	before := calls.Load()
	for _, p := range ps {
		require.NoError(t, b.Release(ctx, holder))
		holder = p.await(t)
	}
	perHandoff := float64(calls.Load()-before) / float64(waiters)
	require.NoError(t, b.Release(ctx, holder))
	t.Logf("%.2f requests per handoff with %d waiters", perHandoff, waiters)
	// The bound leaves room for a read repeated now and then
	// because an event crossed it, not for one per waiter.
	assert.LessOrEqual(t, perHandoff, perHand)
}

// awaitCalls waits until calls reaches n.
func awaitCalls(t *testing.T, calls *atomic.Int64, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < n {
		require.True(t, time.Now().Before(deadline), "%d requests, want %d", calls.Load(), n)
		time.Sleep(time.Millisecond)
	}
}

// A release reaches only the Backend whose waiter waits for the claim
// that left: each Backend subscribes to the channels of the claims its
// waiters wait for, and to nothing every Backend of the prefix hears.
func TestWaitersSubscribeOnlyToTheClaimAhead(t *testing.T) {
	ctx := ctxFor(t)
	hb, c, prefix := newBackend(t)
	holder, ps := queueBehind(t, hb, prefix, "ahead", 3, request)
	info, err := hb.Inspect(ctx, "ahead")
	require.NoError(t, err)
	// Each claim but the last is waited for by one Backend.
	want := map[string]int64{}
	for _, tok := range []uint64{info.Token, info.Waiters[0].Token, info.Waiters[1].Token} {
		want[fmt.Sprintf("{%s}e:%d", prefix, tok)] = 1
	}
	awaitChannels(t, c, prefix, want)

	for _, p := range ps {
		require.NoError(t, hb.Release(ctx, holder))
		holder = p.await(t)
	}
	require.NoError(t, hb.Release(ctx, holder))
	awaitChannels(t, c, prefix, map[string]int64{})
}

// awaitChannels waits until the Pub/Sub channels of prefix are want, with
// those subscriber counts, besides each Backend's own channel.
func awaitChannels(t *testing.T, c *goredis.Client, prefix string, want map[string]int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		chs, err := c.PubSubChannels(ctxFor(t), globEscape("{"+prefix+"}")+"*").Result()
		require.NoError(t, err)
		chs = slices.DeleteFunc(chs, func(ch string) bool { return strings.HasPrefix(ch, "{"+prefix+"}b:") })
		got := map[string]int64{}
		if len(chs) > 0 {
			got, err = c.PubSubNumSub(ctxFor(t), chs...).Result()
			require.NoError(t, err)
		}
		if assert.ObjectsAreEqual(want, got) {
			return
		}
		require.True(t, time.Now().Before(deadline), "channels %v, want %v", got, want)
		time.Sleep(5 * time.Millisecond)
	}
}

// countCalls counts the commands a client sends, but not the handshake of
// a connection the pool opens (HELLO, CLIENT SETINFO): the pool opens one
// whenever requests overlap, as the record of an acquisition time sent
// after Acquire has returned may overlap the next release, and that is no
// request of the Backend's.
type countCalls struct {
	processOnly
	n *atomic.Int64
}

func (c countCalls) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}
func (c countCalls) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}
func (c countCalls) count(cmd goredis.Cmder) {
	if n := cmd.Name(); n != "hello" && n != "client" {
		c.n.Add(1)
	}
}

var _ backend.Backend = (*redisb.Backend)(nil)

// The handoff of a plain exclusive claim is the release alone: the waiter
// just behind holds once it hears that the holder left the head of the
// queue, without a read or a write of its own, and the release records in
// its claim when it came to hold, so Inspect shows that time at once and
// nothing names the claim until its own release.
func TestPlacedHandoffWaitsForNoWrite(t *testing.T) {
	ctx := ctxFor(t)
	hb, rc, prefix := newBackend(t)
	holder, err := hb.Acquire(ctx, request("placed", grant(t, hb, time.Minute), "H"))
	require.NoError(t, err)

	wc := client(t)
	req := request("placed", backend.Lease{}, "W")
	gate := &holdBack{id: req.ID, open: make(chan struct{})}
	wc.AddHook(gate)
	sent := &sentArgs{}
	wc.AddHook(sent) // after the gate: what it holds back is not sent yet
	// The release comes once the waiter has checked the holder after its
	// subscription was confirmed: it is heard.
	wb, _, p := startHeardWaiter(t, wc, prefix, hb, holder, req)
	info, err := hb.Inspect(ctx, "placed")
	require.NoError(t, err)
	joined := info.Waiters[0].Token
	// The waiter's record says it holds since it joined: let the server's
	// clock pass that millisecond, so that the handoff's time differs.
	joinedBy := serverMillis(t, rc)
	deadline := time.Now().Add(10 * time.Second)
	for serverMillis(t, rc) <= joinedBy {
		require.True(t, time.Now().Before(deadline), "the server's clock stands still")
	}

	require.NoError(t, hb.Release(ctx, holder))
	c := p.await(t)
	assert.Equal(t, joined, c.Token)
	// A read of its queue would name its own token, the highest to list.
	for _, args := range sent.all() {
		assert.NotContains(t, args, strconv.FormatUint(joined, 10), "the waiter read its queue: %v", args)
	}
	info, err = hb.Inspect(ctx, "placed")
	require.NoError(t, err)
	require.True(t, info.Held)
	assert.Equal(t, c.Token, info.Token)
	assert.Greater(t, c.AcquiredAt.UnixMilli(), joinedBy)
	assert.Equal(t, c.AcquiredAt, info.AcquiredAt, "Inspect does not show when the claim came to hold")
	assert.Zero(t, gate.held.Load(), "a command named the claim after its handoff")

	close(gate.open)
	require.NoError(t, wb.Release(ctx, c))
}

// serverMillis reads the server's clock in milliseconds.
func serverMillis(t *testing.T, rc *goredis.Client) int64 {
	t.Helper()
	now, err := rc.Time(ctxFor(t)).Result()
	require.NoError(t, err)
	return now.UnixMilli()
}

// afterArg closes done once a command with arg among its arguments has
// been answered.
type afterArg struct {
	processOnly
	arg  string
	once sync.Once
	done chan struct{}
}

func (h *afterArg) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		for _, a := range cmd.Args() {
			if fmt.Sprint(a) == h.arg {
				h.once.Do(func() { close(h.done) })
			}
		}
		return err
	}
}

// sentArgs keeps the arguments of every command a client sends, as text.
type sentArgs struct {
	processOnly
	mu   sync.Mutex
	args [][]string
}

func (s *sentArgs) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		var args []string
		for _, a := range cmd.Args() {
			args = append(args, fmt.Sprint(a))
		}
		s.mu.Lock()
		s.args = append(s.args, args)
		s.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (s *sentArgs) all() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.args)
}

// holdBack holds every command naming claim id but its enqueue (the one
// with mode "fair") until open is closed.
type holdBack struct {
	processOnly
	id   string
	open chan struct{}
	held atomic.Int64
}

func (h *holdBack) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		args := cmd.Args()
		if slices.Contains(args, any(h.id)) && !slices.Contains(args, any("fair")) {
			h.held.Add(1)
			select {
			case <-h.open:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

// A reader that joins a queue of readers holding the key is free as the
// run that queues it finds the queue, and holds on that reply alone: no
// read of its own and no write of its admission before Acquire returns.
func TestReaderJoiningReadersHoldsOnItsEnqueue(t *testing.T) {
	ctx := ctxFor(t)
	hb, _, prefix := newBackend(t)
	first := request("readers", grant(t, hb, time.Minute), "R1")
	first.Shared = true
	c1, err := hb.Acquire(ctx, first)
	require.NoError(t, err)

	second := request("readers", backend.Lease{}, "R2")
	second.Shared = true
	// Every command naming the claim but its enqueue waits at the gate.
	gate := &holdBack{id: second.ID, open: make(chan struct{})}
	sent := &sentArgs{}
	rb := hookedBackend(ctx, t, prefix, gate, sent)
	second.Lease = grant(t, rb, time.Minute).ID
	before := len(sent.all())
	c2 := startAcquire(t, rb, second).await(t)
	var scripts [][]string
	for _, a := range sent.all()[before:] {
		if a[0] == "evalsha" || a[0] == "eval" {
			scripts = append(scripts, a)
		}
	}
	require.Len(t, scripts, 1, "script runs before the gate opened: %v", scripts)
	assert.Contains(t, scripts[0], "fair", "the one script run is the enqueue: %v", scripts[0])
	info, err := hb.Inspect(ctx, "readers")
	require.NoError(t, err)
	assert.Len(t, info.Holders, 2)

	close(gate.open)
	require.NoError(t, rb.Release(ctx, c2))
	require.NoError(t, hb.Release(ctx, c1))
}

// A waiter that leaves from the middle of the queue (its wait cancelled)
// is no handoff: the claim behind it, which waited for it, must go on
// waiting while the holder ahead holds, and take the key only when the
// holder releases.
func TestAWaiterLeavingFromTheMiddleIsNoHandoff(t *testing.T) {
	ctx := ctxFor(t)
	b, _, _ := newBackend(t)
	holder, err := b.Acquire(ctx, request("mid", grant(t, b, time.Minute), "H"))
	require.NoError(t, err)
	pctx, cancel := context.WithCancel(ctx)
	p := startAcquireCtx(pctx, b, request("mid", grant(t, b, time.Minute), "P"))
	awaitWaiting(t, b, "mid", 1)
	w := startAcquire(t, b, request("mid", grant(t, b, time.Minute), "W"))
	awaitWaiting(t, b, "mid", 2)

	cancel()
	require.ErrorIs(t, p.awaitErr(t), context.Canceled)
	awaitWaiting(t, b, "mid", 1)
	info, err := b.Inspect(ctx, "mid")
	require.NoError(t, err)
	assert.Equal(t, holder.Token, info.Token, "the holder still holds")
	select {
	case <-w.done:
		t.Fatalf("W took the key while H held it: %v, %v", w.claim, w.err)
	default:
	}

	require.NoError(t, b.Release(ctx, holder))
	c := w.await(t)
	require.NoError(t, b.Release(ctx, c))
}
