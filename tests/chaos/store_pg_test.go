package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
	"github.com/ash-lock/ashlock/tests/pgtest"
)

// pgStore is a PostgreSQL server of the run's own (tests/pgtest, with its
// Crash, Start, Pause and Resume), and an admin pool straight to it. Locks
// live in the Backend's default schema; the mutex workload's register in
// the table chaos.registers, with every write applied also appended to
// chaos.register_log in the same transaction (its record).
//
// Each holder reaches the server through a pgtest.Proxy of its own, with
// an application_name of its own, so that a blackhole or a
// pg_terminate_backend reaches that holder alone (its pool and its
// Backend's listener alike).
type pgStore struct {
	srv   *pgtest.Server
	admin *pgxpool.Pool
}

const (
	pgDatabase = "postgres"
	// pgAppPrefix starts the application_name of every holder's
	// connections; the admin pool's is pgAppPrefix+"admin".
	pgAppPrefix = "chaos-"
	// pgConnectTimeout bounds a connection's start, which a blackhole
	// would otherwise leave waiting for the holder's context.
	pgConnectTimeout = 2
)

func launchPostgres(ctx context.Context) (*pgStore, error) {
	srv, err := pgtest.Launch(ctx)
	if err != nil {
		return nil, err
	}
	s := &pgStore{srv: srv}
	cfg, err := pgxpool.ParseConfig(srv.DSN(pgDatabase))
	if err != nil {
		return nil, errors.Join(err, s.close())
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = pgAppPrefix + "admin"
	if s.admin, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, errors.Join(err, s.close())
	}
	for _, q := range []string{
		`CREATE SCHEMA chaos`,
		`CREATE TABLE chaos.registers (name text PRIMARY KEY, value bigint NOT NULL, tag text NOT NULL, version bigint NOT NULL)`,
		`CREATE TABLE chaos.register_log (name text, version bigint, value bigint NOT NULL, tag text NOT NULL, PRIMARY KEY (name, version))`,
	} {
		if _, err := s.admin.Exec(ctx, q); err != nil {
			return nil, errors.Join(err, s.close())
		}
	}
	return s, nil
}

func (s *pgStore) newRoute(name string) (route, error) {
	p, err := s.srv.NewProxy()
	if err != nil {
		return nil, err
	}
	return &pgRoute{admin: s.admin, proxy: p, app: pgAppPrefix + name}, nil
}

// inspector: the run has the server to itself, so prefix is not needed.
func (s *pgStore) inspector(ctx context.Context, _ string) (backend.Backend, error) {
	return postgres.New(ctx, s.admin)
}

func (s *pgStore) initRegister(ctx context.Context, name string) (int64, error) {
	_, err := s.admin.Exec(ctx, `INSERT INTO chaos.registers VALUES ($1, 0, $2, 0)`, name, initTag)
	return 0, err
}

// registerRecord: writes are numbered by the register's version, which
// each takes under the register row's lock, so in the order they commit.
func (s *pgStore) registerRecord(ctx context.Context, name string, _ int64) ([]applied, error) {
	rows, err := s.admin.Query(ctx, `SELECT value, tag FROM chaos.register_log WHERE name = $1 ORDER BY version`, name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (applied, error) {
		var a applied
		return a, r.Scan(&a.value, &a.tag)
	})
}

func (s *pgStore) leftovers(ctx context.Context, _ string) ([]string, error) {
	rows, err := s.admin.Query(ctx, `SELECT format('%s token %s', key, token) FROM ashlock.claims ORDER BY key, token`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// revokeLease deletes the claim's lease row, as DESIGN's operator would;
// its claims go with it by cascade.
func (s *pgStore) revokeLease(ctx context.Context, _, key string, token uint64) (string, bool, error) {
	var id int64
	err := s.admin.QueryRow(ctx, `DELETE FROM ashlock.leases
		WHERE id = (SELECT lease_id FROM ashlock.claims WHERE key = $1 AND token = $2 LIMIT 1) RETURNING id`, key, int64(token)).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", true, fmt.Errorf("delete the lease: %w", err)
	}
	return fmt.Sprintf("lease %d", id), true, nil
}

func (s *pgStore) serverFault(ctx context.Context, f fault, logf func(string, ...any)) (string, func() error, error) {
	switch f.kind {
	case faultServerRestart:
		s.srv.Crash()
		logf("fault %v: immediate shutdown", f)
		return f.kind.String(), func() error {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pgtest.StartTimeout)
			defer cancel()
			return s.srv.Start(rctx)
		}, nil
	case faultServerPause:
		if err := s.srv.Pause(); err != nil {
			// Some processes may have stopped: continue them all.
			return "", nil, errors.Join(err, s.srv.Resume())
		}
		logf("fault %v: server stopped", f)
		return f.kind.String(), s.srv.Resume, nil
	}
	return "", nil, fmt.Errorf("postgres: no fault %v", f.kind)
}

func (s *pgStore) close() error {
	if s.admin != nil {
		s.admin.Close()
	}
	return s.srv.Close()
}

// pgRoute is a holder's proxy to the server, and the application_name of
// its connections.
type pgRoute struct {
	admin *pgxpool.Pool // the store's, for pg_terminate_backend
	proxy *pgtest.Proxy
	app   string

	closeOnce sync.Once
	closeErr  error
}

func (r *pgRoute) endpoint() endpoint {
	return endpoint{Store: storePostgres,
		DSN: fmt.Sprintf("%s application_name=%s connect_timeout=%d", r.proxy.DSN(pgDatabase), r.app, pgConnectTimeout)}
}

// blackhole holds every byte through the proxy, both ways, until heal:
// a server gone silent. As with the etcd routes, what was sent meanwhile
// is delivered when the blackhole lifts, as TCP would retransmit it, so
// statements the client gave up on reach the server late. (The proxy's
// Blackhole, which drops bytes out of a live stream, is not used: no
// network does that, and a NOTIFY lost from the middle of the listener's
// stream would test the proxy rather than the lock.)
func (r *pgRoute) blackhole()          { r.proxy.Hold(true) }
func (r *pgRoute) delay(time.Duration) {}
func (r *pgRoute) heal()               { r.proxy.Hold(false) }

// terminate ends the holder's connections with pg_terminate_backend, as
// pgtest.Server.Terminate does, but on a connection of the admin pool: a
// new connection's start can take seconds on a loaded server.
func (r *pgRoute) terminate(ctx context.Context) (int, error) {
	var n int
	err := r.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, r.app).Scan(&n)
	return n, err
}

func (r *pgRoute) close() error {
	r.closeOnce.Do(func() { r.closeErr = r.proxy.Close() })
	return r.closeErr
}

// pgConn is a holder's pool, through its route.
type pgConn struct {
	pool *pgxpool.Pool
	// onGap, if set before newBackend, is the Backend's
	// postgres.WithListenerGapHook.
	onGap func(from, to time.Time)
}

func openPgConn(ctx context.Context, ep endpoint) (*pgConn, error) {
	cfg, err := pgxpool.ParseConfig(ep.DSN)
	if err != nil {
		return nil, err
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &pgConn{pool: p}, nil
}

// newBackend: the run has the server to itself, so prefix is not needed.
func (c *pgConn) newBackend(ctx context.Context, _ string) (backend.Backend, error) {
	if c.onGap != nil {
		return postgres.New(ctx, c.pool, postgres.WithListenerGapHook(c.onGap))
	}
	return postgres.New(ctx, c.pool)
}

func (c *pgConn) register(be backend.Backend, name, key string, unguarded bool) register {
	return &pgRegister{pool: c.pool, be: be.(*postgres.Backend), name: name, key: key, unguarded: unguarded}
}

func (c *pgConn) close() error {
	c.pool.Close()
	return nil
}

// pgRegister is the register in chaos.registers, read and written each
// in a transaction whose first statement is the Backend's Fence on the
// holder's claim at key: the write commits only while the claim holds
// (unguarded, the negative control, leaves the Fence out).
type pgRegister struct {
	pool      *pgxpool.Pool
	be        *postgres.Backend
	name, key string
	unguarded bool
}

func (r *pgRegister) read(ctx context.Context, hd held) (int64, status) {
	var v int64
	st := r.fenced(ctx, hd, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT value FROM chaos.registers WHERE name = $1`, r.name).Scan(&v)
	})
	return v, st
}

func (r *pgRegister) write(ctx context.Context, hd held, value int64, tag string) status {
	return r.fenced(ctx, hd, func(tx pgx.Tx) error {
		ct, err := tx.Exec(ctx, `WITH u AS (UPDATE chaos.registers SET value = $2, tag = $3, version = version + 1 WHERE name = $1 RETURNING version)
			INSERT INTO chaos.register_log (name, version, value, tag) SELECT $1, version, $2, $3 FROM u`, r.name, value, tag)
		if err == nil && ct.RowsAffected() != 1 {
			err = fmt.Errorf("register %q: %d rows written", r.name, ct.RowsAffected())
		}
		return err
	})
}

// fenced runs f in a transaction that passed Fence first. A refusal by
// Fence is stale (nothing was done); any other failure is an unknown
// outcome.
func (r *pgRegister) fenced(ctx context.Context, hd held, f func(pgx.Tx) error) status {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return statusUnknown
	}
	defer func() {
		// After a commit this does nothing; otherwise it ends the
		// transaction, or the broken connection does.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		_ = tx.Rollback(rctx)
		cancel()
	}()
	if !r.unguarded {
		if err := r.be.Fence(ctx, tx, r.key, hd.token()); err != nil {
			if errors.Is(err, backend.ErrLeaseExpired) {
				return statusStale
			}
			return statusUnknown
		}
	}
	if f(tx) != nil || tx.Commit(ctx) != nil {
		return statusUnknown
	}
	return statusOK
}
