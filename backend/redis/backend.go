package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ash-lock/ashlock/backend"
)

// Backend keeps lock claims in Redis. It implements backend.Backend and
// backend.Observer; all its methods are safe for concurrent use. It uses
// the caller's client for scripts and one Pub/Sub connection of its own,
// however many locks it holds.
type Backend struct {
	c      goredis.UniversalClient
	lay    layout
	db     int
	log    *slog.Logger
	reg    *registry
	notify bool // keyspace notifications of lease ends were on at New
	onGap  func(from, to time.Time)
	names  *backend.ClaimNames // of the claims it names itself
	own    string              // its channel: removals tell the claims it named behind them (see drop)

	done      chan struct{} // closed by Close
	closeOnce sync.Once
	bg        context.Context    // the background goroutines' context
	cancel    context.CancelFunc // ends bg
	wg        sync.WaitGroup     // the subscriber, the reapers it starts, the records of recordAcquired

	mu       sync.Mutex
	ps       *goredis.PubSub // the subscription, replaced if it goes silent
	psClosed bool
}

var (
	_ backend.Backend    = (*Backend)(nil)
	_ backend.Observer   = (*Backend)(nil)
	_ backend.ClaimNamer = (*Backend)(nil)
)

// NamesClaims marks the Backend as naming its claims itself
// (backend.ClaimNamer, with backend.ClaimNames: a claim's name is stored
// several times, in its queue entry, its record's field and its lease's
// index, and written and deleted by every cycle).
func (b *Backend) NamesClaims() {}

// New returns a Backend that keeps its locks in the Redis server (or
// cluster, or failover group) c talks to. The caller keeps ownership of c
// (its TLS, auth, pool) and closes it after the Backend. c must not be a
// *goredis.Ring: a Ring sends a key to another shard while its own is
// down, and the lock's state would not follow it.
//
// New subscribes to the keyspace notifications of the Backend's leases,
// and returns once the server has confirmed it, or ctx ends. It reads notify-keyspace-events and logs a WARN when
// the notifications a deleted lease needs (K, g and x) are off: a lease
// deleted by an operator then reaches its holders only at their next
// renewal. On failure nothing is left open; errors wrap ErrInvalidConfig
// (an option) or ErrUnavailable (the server).
func New(ctx context.Context, c goredis.UniversalClient, opts ...Option) (*Backend, error) {
	o := options{prefix: DefaultPrefix}
	for _, opt := range opts {
		opt(&o)
	}
	if c == nil {
		return nil, fmt.Errorf("%w: redis: nil client", backend.ErrInvalidConfig)
	}
	if _, ok := c.(*goredis.Ring); ok {
		return nil, fmt.Errorf("%w: redis: a Ring client (it sends a key to another shard while its own is down)",
			backend.ErrInvalidConfig)
	}
	lay, err := newLayout(o.prefix)
	if err != nil {
		return nil, err
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	b := &Backend{c: c, lay: lay, db: dbOf(c), log: o.logger, onGap: o.onGap, done: make(chan struct{}),
		names: backend.NewClaimNames()}
	b.own = lay.backendChannel(b.names.Base())
	b.reg = newRegistry(lay, sender{b})
	b.checkNotifications(ctx)
	ps, err := b.subscribe(ctx)
	if err != nil {
		return nil, b.fail(ctx, "subscribe", err)
	}
	b.ps = ps
	b.bg, b.cancel = context.WithCancel(context.Background())
	b.wg.Add(1)
	go b.listen(b.bg)
	return b, nil
}

// dbOf returns the database c uses: keyspace notification channels name it.
func dbOf(c goredis.UniversalClient) int {
	if cl, ok := c.(*goredis.Client); ok {
		return cl.Options().DB
	}
	return 0
}

// checkNotifications records whether the server publishes the end of
// leases, and warns when it does not.
func (b *Backend) checkNotifications(ctx context.Context) {
	cfg, err := b.c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		b.log.Warn("redis: cannot read notify-keyspace-events; a deleted lease may be noticed only at the next renewal",
			"error", err)
		return
	}
	flags := cfg["notify-keyspace-events"]
	all := strings.Contains(flags, "A")
	var missing string
	for _, f := range []struct {
		flag string
		any  bool
	}{{"K", false}, {"g", all}, {"x", all}} {
		if !f.any && !strings.Contains(flags, f.flag) {
			missing += f.flag
		}
	}
	if missing == "" {
		b.notify = true
		return
	}
	b.log.Warn("redis: keyspace notifications of leases are off, so a deleted lease reaches its holders only at their next renewal; "+
		"turn them on with CONFIG SET notify-keyspace-events "+flags+missing+" (or in redis.conf)",
		"notify-keyspace-events", flags)
}

// Close stops the Backend's subscriber and wakes every Acquire and Observe
// waiting in it: they return ErrClosed, an Acquire after removing its
// claim. Close does not release claims that hold their keys and does not
// close the client. It returns once the Backend's goroutines have ended.
// Later calls of any method return ErrClosed; a second Close returns nil.
func (b *Backend) Close() error {
	first := false
	b.closeOnce.Do(func() {
		first = true
		close(b.done)
		b.cancel()
		b.mu.Lock()
		b.psClosed = true
		ps := b.ps
		b.mu.Unlock()
		_ = ps.Close()
		b.reg.wakeAll() // every watcher and observer then sees done
	})
	if !first {
		return nil
	}
	b.wg.Wait()
	return nil
}

// spawn runs f on a goroutine of the Backend's, which Close waits for,
// unless Close has begun: then f does not run. Under b.mu, so that no
// goroutine starts once Close waits.
func (b *Backend) spawn(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.psClosed {
		b.wg.Go(f)
	}
}

// closedErr returns an error wrapping ErrClosed once Close has been called.
func (b *Backend) closedErr(op string) error {
	select {
	case <-b.done:
		return fmt.Errorf("redis %s: %w", op, backend.ErrClosed)
	default:
		return nil
	}
}

// fail wraps an error of a call to Redis: ctx's error once ctx has ended,
// else ErrUnavailable.
func (b *Backend) fail(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("redis %s: %w", op, backend.ContextError(ctx))
	}
	if errors.Is(err, backend.ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: redis %s: %w", backend.ErrUnavailable, op, err)
}
