package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ash-lock/ashlock/backend"
)

var (
	_ backend.Backend    = (*Backend)(nil)
	_ backend.Observer   = (*Backend)(nil)
	_ backend.ClaimNamer = (*Backend)(nil)
)

// Backend keeps lock claims in PostgreSQL tables of one schema. Create it
// with New; it is safe for concurrent use. It uses the caller's pool for
// every statement and one connection of its own for LISTEN.
type Backend struct {
	pool      *pgxpool.Pool
	schema    string
	sql       statements
	hub       *hub
	names     *names
	listenCfg *pgx.ConnConfig // the listener's; copied for each connection
	ping      time.Duration   // the listener's liveness check (see awaitNotification)
	onGap     func(from, to time.Time)
	log       *slog.Logger

	closeOnce sync.Once
	done      chan struct{} // closed by Close
	stop      context.CancelFunc

	// bg counts the Backend's goroutines (the listener, its checks,
	// background cleanups); Close waits for them. spawn adds to it only
	// while open, under mu, so no Add races with Close's Wait.
	mu       sync.Mutex
	isClosed bool
	bg       sync.WaitGroup
}

// Option configures a Backend in New.
type Option func(*config)

type config struct {
	schema string
	listen *pgx.ConnConfig
	ping   time.Duration
	onGap  func(from, to time.Time)
	logger *slog.Logger
}

// WithLogger sets the logger for warnings (a claim left behind deleted)
// and debug messages; nil means slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithSchema sets the schema that holds the Backend's tables (default
// DefaultSchema, "ashlock"). It must be a plain lower-case identifier of at
// most 55 bytes ([a-z_][a-z0-9_]*); New fails otherwise with an error
// wrapping backend.ErrInvalidConfig. Backends that share a schema share
// their locks.
func WithSchema(name string) Option { return func(c *config) { c.schema = name } }

// WithListenConfig sets the connection config of the Backend's listener
// connection (default: a copy of the pool's). Use it when the pool goes
// through a pooler in transaction mode, which LISTEN does not survive:
// point the listener at the server, or at a session-mode pool, on the
// same database. The Backend keeps its own copy.
func WithListenConfig(cfg *pgx.ConnConfig) Option {
	return func(c *config) {
		if cfg != nil {
			c.listen = cfg.Copy()
		}
	}
}

// DefaultListenerPing is the listener's liveness interval unless
// WithListenerPing sets another.
const DefaultListenerPing = 5 * time.Second

// WithListenerPing sets how long the listener connection may stay silent
// before the Backend checks it with a round trip, which must answer
// within the same time (default DefaultListenerPing). A connection that
// fails the check is closed and opened again, as one the server reset:
// waiters read their queues again and held claims are checked, so a
// connection that died silently (a NAT or firewall that forgot it, a
// failover) costs at most about twice d instead of TCP keepalive's
// minutes. d must comfortably exceed a round trip to the server; New fails
// with an error wrapping backend.ErrInvalidConfig when it is not positive.
func WithListenerPing(d time.Duration) Option { return func(c *config) { c.ping = d } }

// WithListenerGapHook sets a function the Backend calls each time its
// listener connection was lost (from: when it failed, or, for one that
// failed its liveness check, when it last answered) and is back with
// every observed key's queue read again (to), and again for an Observe
// that had to read its key's queue itself, later. Changes of an observed key made between
// may be missed by Observe (it resumes from that read); none is
// reordered. f is called from the Backend's goroutines, concurrently; it
// must not block.
func WithListenerGapHook(f func(from, to time.Time)) Option {
	return func(c *config) { c.onGap = f }
}

// New returns a Backend on pool, which the caller owns and closes after
// the Backend. It creates the schema, tables, sequence and trigger it needs
// if they are missing (see the package documentation), safely when many
// processes start at once, and opens its listener connection (a copy of
// the pool's connection config); it blocks until both are done or ctx
// ends. A role with the right to create objects in the schema (or only to
// use them, once they exist) is enough.
//
// Errors: backend.ErrInvalidConfig for a bad schema name,
// backend.ErrUnavailable when the server cannot be reached or refuses.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Backend, error) {
	cfg := config{schema: DefaultSchema, ping: DefaultListenerPing}
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkSchema(cfg.schema); err != nil {
		return nil, err
	}
	if cfg.ping <= 0 {
		return nil, fmt.Errorf("%w: postgres: listener ping %v is not positive", backend.ErrInvalidConfig, cfg.ping)
	}
	if pool == nil {
		return nil, fmt.Errorf("%w: postgres: nil pool", backend.ErrInvalidConfig)
	}
	if err := ensureSchema(ctx, pool, cfg.schema); err != nil {
		return nil, unavailable(ctx, "create schema", err)
	}
	b := &Backend{
		pool:      pool,
		schema:    cfg.schema,
		sql:       newStatements(pgx.Identifier{cfg.schema}.Sanitize()),
		hub:       newHub(),
		names:     newNames(),
		done:      make(chan struct{}),
		listenCfg: cfg.listen,
		ping:      cfg.ping,
		onGap:     cfg.onGap,
		log:       cfg.logger,
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	if b.listenCfg == nil {
		b.listenCfg = pool.Config().ConnConfig.Copy()
	}
	conn, err := b.listenConn(ctx)
	if err != nil {
		return nil, unavailable(ctx, "listen", err)
	}
	lctx, stop := context.WithCancel(context.Background())
	b.stop = stop
	b.spawn(func() { b.listen(lctx, conn) })
	return b, nil
}

// NamesClaims marks the Backend as one that names the claims whose
// AcquireRequest.ID is empty (backend.ClaimNamer): see names.
func (b *Backend) NamesClaims() {}

// spawn runs f on a goroutine of the Backend's, unless the Backend is
// closed; it reports whether it did.
func (b *Backend) spawn(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isClosed {
		return false
	}
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		f()
	}()
	return true
}

// Close stops the listener and ends every Acquire and Observe still
// waiting (with backend.ErrClosed). It neither removes claims nor closes
// the pool. Later calls of any method return backend.ErrClosed; a second
// Close returns nil.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.isClosed = true
		b.mu.Unlock()
		close(b.done)
		b.stop()
		b.bg.Wait()
	})
	return nil
}

// closed returns an error wrapping backend.ErrClosed once Close was called.
func (b *Backend) closed(op string) error {
	select {
	case <-b.done:
		return closedError(op)
	default:
		return nil
	}
}

func closedError(op string) error { return fmt.Errorf("postgres %s: %w", op, backend.ErrClosed) }

// unavailable wraps a failed statement: ctx's error when ctx ended (joined
// with ErrUnavailable unless the statement was merely cancelled),
// otherwise backend.ErrUnavailable.
func unavailable(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("postgres %s: %w", op, errors.Join(backend.ContextError(ctx), err))
	}
	return fmt.Errorf("%w: postgres %s: %w", backend.ErrUnavailable, op, err)
}

// cleanupTimeout bounds the statements that remove what a failed Acquire
// left behind, which run on a context of their own.
const cleanupTimeout = 10 * time.Second

// isCode reports whether err is a server error with SQLSTATE code.
func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// SQLSTATE codes the Backend handles.
const (
	foreignKeyViolation = "23503" // a claim's lease was deleted under it
	deadlockDetected    = "40P01"
)
