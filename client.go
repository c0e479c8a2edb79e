package ashlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/internal/hlc"
)

// cleanupTimeout bounds every call the client makes on its own behalf
// (releases after a dead caller context, revokes, the lease check after a
// failed Acquire), so cleanup never hangs on a context that has already
// ended; Close's ctx, when it ends, cuts them short (see shutdown).
const cleanupTimeout = 5 * time.Second

// A LockClient hands out locks on one backend. Create it with Connect or
// ConnectWith and Close it when done. All methods are safe for concurrent
// use; one client per process is the usual shape, and it serves any number
// of keys and guards at the cost of one watchdog goroutine.
type LockClient struct {
	cfg         LockConfig
	be          backend.Backend
	closeBE     func() error // non-nil when Connect created the backend
	local       bool         // be implements backend.Local
	log         *slog.Logger
	metrics     *metrics
	wd          *watchdog
	clock       *hlc.Clock // nil unless cfg.Stamps
	stampFn     func(backend.Timestamp) (backend.Timestamp, error)
	owner       string
	namesClaims bool // be names its claims (backend.ClaimNamer): no claim ID to make
	closed      atomic.Bool
	closeOnce   sync.Once
	hubs        hubs // the elections observed through this client (election_observe.go)
}

// Connect creates a client for the backend named by cfg.ClusterSeed: "" or
// "memory://" for the in-process backend, "etcd://h1:2379,h2:2379/prefix/"
// for etcd. It blocks until the backend is reachable or ctx ends.
//
// Close closes the backend that Connect created. Errors: ErrInvalidConfig,
// ErrInvalidTTL, ErrUnavailable, or ctx's error joined with the cause.
func Connect(ctx context.Context, cfg LockConfig) (*LockClient, error) {
	if err := validateConfig(cfg); err != nil {
		return nil, err
	}
	be, closeBE, err := openSeed(ctx, cfg.ClusterSeed)
	if err != nil {
		return nil, err
	}
	c, err := newClient(cfg, be)
	if err != nil {
		_ = closeBE()
		return nil, err
	}
	c.closeBE = closeBE
	return c, nil
}

// ConnectWith creates a client on a backend the caller made (and owns: Close
// leaves it open). cfg.ClusterSeed is ignored. It does not block.
func ConnectWith(ctx context.Context, cfg LockConfig, b backend.Backend) (*LockClient, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidConfig)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := validateConfig(cfg); err != nil {
		return nil, err
	}
	return newClient(cfg, b)
}

func validateConfig(cfg LockConfig) error {
	_, _, errs := (&LockBuilder{}).timing(&cfg, nil)
	return errors.Join(errs...)
}

func newClient(cfg LockConfig, be backend.Backend) (*LockClient, error) {
	log := cmp.Or(cfg.Logger, slog.Default())
	m, err := newMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, err
	}
	c := &LockClient{cfg: cfg, be: be, log: log, metrics: m, owner: defaultOwner()}
	c.hubs.m = make(map[string]*hub)
	_, c.local = be.(backend.Local)
	_, c.namesClaims = be.(backend.ClaimNamer)
	if cfg.Stamps {
		c.clock = hlc.New(nil, 0)
		c.stampFn = c.stamp
	}
	c.wd = newWatchdog(be, log, m)
	return c, nil
}

// stamp gives an acquisition a stamp above prev, the highest stamp of the
// key's earlier holders, without merging a stamp too far ahead of our clock.
func (c *LockClient) stamp(prev backend.Timestamp) (backend.Timestamp, error) {
	if err := c.clock.Update(prev); err != nil {
		return backend.Timestamp{}, err
	}
	return c.clock.Now(), nil
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// Lock returns a builder for a lock on key. It never fails: the key and
// options are checked by Acquire, TryAcquire and Do.
func (c *LockClient) Lock(key string) *LockBuilder {
	return &LockBuilder{client: c, key: key, fair: true}
}

// LockAll returns a builder for one lock on every key given: Acquire takes
// all of them or none. It never deadlocks, whatever order callers list
// keys in and however LockAll requests overlap each other and plain Locks:
// its claims on all keys are made at once, with one fencing token, greater
// than every earlier token of each key, and that token orders overlapping
// requests the same way at every key they share. Waiting is FIFO per key.
// The guard's FencingToken is valid at each key's fence, and Keys returns
// the set, sorted.
//
// It never fails: the keys are checked by Acquire, TryAcquire and Do, which
// report none or a duplicate or invalid key as ErrInvalidKey and more than
// 64 keys as ErrInvalidConfig. LockAll works with Shared; WithPermits(n > 1)
// is ErrInvalidConfig. Uncontended, taking and releasing cost one backend
// round trip each, whatever the number of keys.
func (c *LockClient) LockAll(keys ...string) *LockBuilder {
	// Checked by Acquire (backend.CheckRequest), with the other options.
	sorted := append([]string{}, keys...)
	slices.Sort(sorted)
	b := &LockBuilder{client: c, fair: true, keys: sorted}
	if len(sorted) > 0 {
		b.key = sorted[0]
	}
	return b
}

// Inspect reports who holds key, with what token and since when, and the
// fair waiters queued behind it. A free key gives Held == false and a nil
// error. It blocks for one backend round trip.
func (c *LockClient) Inspect(ctx context.Context, key string) (LockInfo, error) {
	if c.closed.Load() {
		return LockInfo{}, ErrClosed
	}
	if err := backend.CheckKey(key); err != nil {
		return LockInfo{}, err
	}
	info, err := c.be.Inspect(ctx, key)
	if err != nil {
		return LockInfo{}, withCtx(ctx, err)
	}
	return info, nil
}

// Close releases every guard still held (their Err becomes ErrUnlocked and
// their claims are removed by revoking the client's leases), fails waiting
// acquisitions with ErrClosed, stops the watchdog, and closes the backend if
// Connect created it. It blocks until that is done, or until ctx ends:
// the calls to the backend still running are then cancelled, and a claim
// whose lease could not be revoked expires with its TTL. A ctx that has
// already ended when Close is called still gets one attempt at the
// revokes, bounded by a timeout of the client's own (5s), as Unlock still
// releases. The client's goroutines are gone when Close returns. A second
// Close returns nil; every other method returns ErrClosed afterwards.
func (c *LockClient) Close(ctx context.Context) error {
	var err error // stays nil for every Close but the first
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		err = c.shutdown(ctx)
	})
	return err
}

func (c *LockClient) shutdown(ctx context.Context) error {
	// Close returns soon after ctx ends: the revokes below and every call
	// still running on the client's behalf (revokes, retried releases) use
	// wd.bg, which ctx's end cancels, and a Backend returns promptly once
	// its context ends. A ctx that has already ended when Close starts
	// still gets one attempt at the revokes, bounded by cleanupTimeout, as
	// Unlock still releases: else a Close deferred past a cancellation
	// would leave every claim to block its key until the TTL ran out.
	if ctx.Err() == nil {
		defer context.AfterFunc(ctx, c.wd.cancelBG)()
	}
	var errs []error
	leases := c.wd.close()
	rctx, cancel := context.WithTimeout(c.wd.bg, cleanupTimeout)
	defer cancel()
	for l, guards := range leases {
		for _, g := range guards {
			g.end(ErrUnlocked) // uncounts it from the held gauge if it was handed out
		}
		// One revoke removes every claim on the lease, however many guards
		// shared it.
		if err := c.be.Revoke(rctx, l.id); err != nil {
			errs = append(errs, fmt.Errorf("ashlock: revoking lease on close: %w", err))
		}
	}
	c.wd.wg.Wait()
	c.wd.cancelBG()
	if c.closeBE != nil {
		if err := c.closeBE(); err != nil {
			errs = append(errs, err)
		}
	}
	return withCtx(ctx, errors.Join(errs...))
}

// withCtx joins err with ctx's error when ctx has ended, so that callers
// can test for both the sentinel and the cancellation.
func withCtx(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return errors.Join(err, cerr)
	}
	return err
}
