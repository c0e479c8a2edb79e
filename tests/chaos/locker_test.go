package chaos

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
)

// newEtcdClient returns a client of the given endpoints with a no-op
// logger. Endpoint auto-sync stays off (the zero AutoSyncInterval), or the
// client would learn the members' real addresses and bypass its proxies.
// gRPC keep-alives let it notice a connection that went dead under a
// blackhole once the blackhole is gone.
func newEtcdClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		Logger:               zap.NewNop(),
	})
}

// locker is how a holder takes the lock: an ashlock client (the library
// under test) or, for the negative control, etcd's concurrency package.
type locker interface {
	acquire(ctx context.Context) (held, error)
	close(ctx context.Context) error
}

// held is one acquisition.
type held interface {
	token() uint64
	stamp() (wall int64, logical uint32, ok bool)
	// valid reports whether the holder may still act as the lock's owner:
	// the question a careful holder asks before each step.
	valid() bool
	done() <-chan struct{}
	release(ctx context.Context) error
	// permit is the guard's permit of a counted lock (0 otherwise); keys
	// are the keys it holds.
	permit() int
	keys() []string
}

// libLocker takes the lock with ashlock on a Backend of the run's store.
type libLocker struct {
	client *ashlock.LockClient
	be     backend.Backend
	lock   *ashlock.LockBuilder
	owner  string
	fair   bool
}

func newLibLocker(ctx context.Context, cn conn, prefix, key, owner string, ttl time.Duration, fair bool) (*libLocker, error) {
	be, err := cn.newBackend(ctx, prefix)
	if err != nil {
		return nil, err
	}
	c, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{
		DefaultTTL: ttl,
		Stamps:     true,
		Logger:     slog.New(slog.DiscardHandler),
	}, be)
	if err != nil {
		return nil, errors.Join(err, be.Close())
	}
	return &libLocker{client: c, be: be, lock: c.Lock(key).WithOwner(owner).WithFairness(fair), owner: owner, fair: fair}, nil
}

// withPermits makes l take its key as a counted lock of n permits.
func (l *libLocker) withPermits(n int) *libLocker {
	l.lock = l.lock.WithPermits(n)
	return l
}

func (l *libLocker) acquire(ctx context.Context) (held, error) {
	return l.acquireWith(ctx, l.lock)
}

// acquireAll takes every one of keys at once with LockAll.
func (l *libLocker) acquireAll(ctx context.Context, keys []string) (held, error) {
	hd, err := l.acquireWith(ctx, l.client.LockAll(keys...).WithOwner(l.owner).WithFairness(l.fair))
	if err != nil {
		return nil, err
	}
	// The holder works on the keys it asked for, not on those the guard
	// reports: a LockAll that held fewer keys than asked, and said so,
	// would otherwise go unseen, its holder touching only what it holds.
	lh := hd.(*libHeld)
	lh.want = slices.Sorted(slices.Values(keys))
	return lh, nil
}

func (l *libLocker) acquireWith(ctx context.Context, b *ashlock.LockBuilder) (held, error) {
	g, err := b.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	claim, err := g.Claim()
	if err != nil {
		// Poisoned already; give the claim back and report the loss.
		_ = g.Unlock(ctx)
		return nil, err
	}
	return &libHeld{g: g, claim: claim.Token, c: claim}, nil
}

// close closes the client (which revokes its leases) and then the backend.
func (l *libLocker) close(ctx context.Context) error {
	return errors.Join(l.client.Close(ctx), l.be.Close())
}

type libHeld struct {
	g     *ashlock.Guard
	claim uint64
	c     backend.Claim // for the register's guard
	want  []string      // a LockAll's keys as asked for, sorted; nil for one key
}

func (h *libHeld) token() uint64 { return h.claim }

func (h *libHeld) stamp() (int64, uint32, bool) {
	st, ok := h.g.Stamp()
	return st.WallTime, st.Logical, ok
}

func (h *libHeld) valid() bool {
	_, err := h.g.FencingToken()
	return err == nil
}

func (h *libHeld) permit() int { return h.g.Permit() }
func (h *libHeld) keys() []string {
	if h.want != nil {
		return h.want
	}
	return h.g.Keys()
}
func (h *libHeld) done() <-chan struct{}             { return h.g.Done() }
func (h *libHeld) release(ctx context.Context) error { return h.g.Unlock(ctx) }

// sessionLocker takes the lock with etcd's concurrency.Mutex on a
// concurrency.Session and trusts it until the session's Done channel
// closes: the rule the strict mutex model is expected to catch, because
// the client's lease keep-alive gives up only some time after its last
// answer plus the TTL, while the server counts the TTL from when it
// renewed the lease.
type sessionLocker struct {
	cli    *clientv3.Client
	prefix string
	ttl    int
	// life is the sessions' context: it must outlive Close, which revokes
	// the lease on it, so it is ended by close, after that.
	life    context.Context
	endLife context.CancelFunc
	sess    *concurrency.Session
}

func newSessionLocker(cli *clientv3.Client, prefix string, ttl time.Duration) *sessionLocker {
	life, end := context.WithCancel(context.Background())
	return &sessionLocker{cli: cli, prefix: prefix, ttl: int(ttl / time.Second), life: life, endLife: end}
}

func (l *sessionLocker) acquire(ctx context.Context) (held, error) {
	if l.sess != nil {
		select {
		case <-l.sess.Done():
			_ = l.sess.Close()
			l.sess = nil
		default:
		}
	}
	if l.sess == nil {
		// Grant here, on ctx: NewSession would grant on the session's
		// context, which has no deadline.
		lease, err := l.cli.Grant(ctx, int64(l.ttl))
		if err != nil {
			return nil, err
		}
		s, err := concurrency.NewSession(l.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(l.ttl), concurrency.WithContext(l.life))
		if err != nil {
			return nil, err
		}
		l.sess = s
	}
	m := concurrency.NewMutex(l.sess, l.prefix)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	cmp := m.IsOwner()
	return &sessionHeld{s: l.sess, m: m, rev: uint64(cmp.GetCompare().GetCreateRevision()), cmp: cmp}, nil
}

// close revokes the session's lease (Close has a timeout of its own: the
// TTL) and ends the sessions' context.
func (l *sessionLocker) close(context.Context) error {
	defer l.endLife()
	if l.sess == nil {
		return nil
	}
	err := l.sess.Close()
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// Close revokes on the session's keep-alive connection; a fault
		// may just have broken it. Try once more on a fresh request.
		ctx, cancel := context.WithTimeout(l.life, releaseTimeout)
		defer cancel()
		_, err = l.cli.Revoke(ctx, l.sess.Lease())
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil // the lease is gone already: nothing to clean up
	}
	return err
}

type sessionHeld struct {
	s   *concurrency.Session
	m   *concurrency.Mutex
	rev uint64
	cmp clientv3.Cmp
}

func (h *sessionHeld) token() uint64                { return h.rev }
func (h *sessionHeld) stamp() (int64, uint32, bool) { return 0, 0, false }

func (h *sessionHeld) valid() bool {
	select {
	case <-h.s.Done():
		return false
	default:
		return true
	}
}

func (h *sessionHeld) permit() int                       { return 0 }
func (h *sessionHeld) keys() []string                    { return nil }
func (h *sessionHeld) done() <-chan struct{}             { return h.s.Done() }
func (h *sessionHeld) release(ctx context.Context) error { return h.m.Unlock(ctx) }
