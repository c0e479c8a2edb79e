// Package pgfence keeps fencing watermarks in PostgreSQL, inside the
// caller's own transaction, for tokens from any ashlock backend: an etcd
// or Redis lock protecting rows in PostgreSQL, say. It follows the rules
// of fencing.Fence (Admit for exclusive holders, AdmitShared for shared
// ones), and its marks are rows, so they survive restarts and are shared
// by every process that writes the resource.
//
// The marks live in <schema>.fences (resource text PRIMARY KEY, h bigint,
// e bigint): h is the highest token of any admitted operation, e the
// highest admitted by Admit. A decision locks the resource's row until
// the caller's transaction ends, so the write that follows commits only
// if no newer token was admitted meanwhile, and an older one admitted
// later waits for it and is then refused:
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	if err := fence.Admit(ctx, tx, "account/7", token); err != nil {
//		return err // errors.Is(err, fencing.ErrStaleToken): a newer holder wrote
//	}
//	tx.Exec(ctx, "UPDATE accounts SET ...")
//	tx.Commit(ctx)
package pgfence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ash-lock/ashlock/fencing"
)

// DefaultSchema is the schema of the fences table unless WithSchema sets
// one.
const DefaultSchema = "ashlock"

// ErrInvalidSchema reports a schema name that is not a plain lower-case
// identifier of at most 63 bytes.
var ErrInvalidSchema = errors.New("pgfence: invalid schema name")

// ErrTokenRange reports a token above the largest bigint, which the
// fences table cannot hold.
var ErrTokenRange = errors.New("pgfence: token out of range")

var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Fence admits tokens against watermarks kept in PostgreSQL. It holds no
// state of its own besides its statements and is safe for concurrent use.
type Fence struct {
	ensure, read, lockShared, lockExclusive, raiseH, raiseBoth string
}

// Option configures a Fence in New.
type Option func(*config)

type config struct{ schema string }

// WithSchema sets the schema of the fences table (default "ashlock").
func WithSchema(name string) Option { return func(c *config) { c.schema = name } }

// New returns a Fence whose marks are in <schema>.fences, creating the
// schema and table if missing (under an advisory lock, so many processes
// may start at once; a role that may only use an existing table runs no
// DDL). It blocks until that is done or ctx ends. Errors: ErrInvalidSchema,
// or the server's.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Fence, error) {
	cfg := config{schema: DefaultSchema}
	for _, o := range opts {
		o(&cfg)
	}
	if !plainIdent.MatchString(cfg.schema) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidSchema, cfg.schema)
	}
	s := pgx.Identifier{cfg.schema}.Sanitize()
	if err := create(ctx, pool, s); err != nil {
		return nil, fmt.Errorf("pgfence: create %s.fences: %w", s, err)
	}
	f := func(q string) string { return fmt.Sprintf(q, s) }
	return &Fence{
		ensure:        f(`INSERT INTO %s.fences (resource) VALUES ($1) ON CONFLICT (resource) DO NOTHING`),
		read:          f(`SELECT h, e FROM %s.fences WHERE resource = $1`),
		lockShared:    f(`SELECT h, e FROM %s.fences WHERE resource = $1 FOR SHARE`),
		lockExclusive: f(`SELECT h, e FROM %s.fences WHERE resource = $1 FOR UPDATE`),
		raiseH:        f(`UPDATE %s.fences SET h = $2 WHERE resource = $1`),
		raiseBoth:     f(`UPDATE %s.fences SET h = $2, e = $2 WHERE resource = $1`),
	}, nil
}

func create(ctx context.Context, pool *pgxpool.Pool, s string) error {
	exists := func(ctx context.Context, q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) (schema, table bool, err error) {
		err = q.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL, to_regclass($2) IS NOT NULL`, s, s+".fences").Scan(&schema, &table)
		return schema, table, err
	}
	if _, table, err := exists(ctx, pool); err != nil || table {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "ashlock fences "+s); err != nil {
			return err
		}
		schema, table, err := exists(ctx, tx)
		if err != nil || table {
			return err
		}
		if !schema {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+s); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+s+`.fences (
			resource text PRIMARY KEY,
			h bigint NOT NULL DEFAULT 0,
			e bigint NOT NULL DEFAULT 0)`)
		return err
	})
}

// Admit decides, inside tx, whether an exclusive holder's request carrying
// token may proceed against resource, by fencing.Fence.Admit's rule: if
// token is at least the highest token admitted for resource (by Admit or
// AdmitShared), it raises both marks to token and returns nil. Otherwise it
// returns a *fencing.StaleTokenError (wrapping fencing.ErrStaleToken) and
// changes nothing; roll tx back.
//
// It locks the resource's row FOR UPDATE until tx ends: a concurrent
// admission for the same resource waits for tx, and is then decided
// against what tx committed. One or two round trips (two when a mark
// moves).
func (f *Fence) Admit(ctx context.Context, tx pgx.Tx, resource string, token uint64) error {
	h, e, err := f.lock(ctx, tx, f.lockExclusive, resource, token)
	if err != nil {
		return err
	}
	if !fencing.ValidateWrite(token, h) {
		return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: h}
	}
	if h == token && e == token {
		return nil // the current holder's next request
	}
	if _, err := tx.Exec(ctx, f.raiseBoth, resource, int64(token)); err != nil {
		return fmt.Errorf("pgfence: admit %q: %w", resource, err)
	}
	return nil
}

// AdmitShared decides, inside tx, whether a shared holder's request
// carrying token may proceed against resource, by
// fencing.Fence.AdmitShared's rule: if token is at least the highest token
// admitted by Admit, it raises the highest admitted token to token (if
// higher) and returns nil; shared holders never refuse one another.
// Otherwise it returns a *fencing.StaleTokenError reporting the exclusive
// mark and changes nothing; roll tx back.
//
// A token within the marks locks the row FOR SHARE, so shared holders do
// not wait for one another, while an Admit waits for their transactions;
// a token that raises the mark locks it FOR UPDATE. Two or three round
// trips.
func (f *Fence) AdmitShared(ctx context.Context, tx pgx.Tx, resource string, token uint64) error {
	// A first look without a lock picks the lock: taking FOR SHARE and
	// then upgrading it would deadlock two readers that both raise h.
	h, e, err := f.lock(ctx, tx, f.read, resource, token)
	if err != nil {
		return err
	}
	if !fencing.ValidateWrite(token, e) { // the marks only grow: stale now is stale for good
		return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: e}
	}
	mode := f.lockShared
	if token > h {
		mode = f.lockExclusive
	}
	if h, e, err = f.lock(ctx, tx, mode, resource, token); err != nil {
		return err
	}
	if !fencing.ValidateWrite(token, e) {
		return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: e}
	}
	if token <= h {
		return nil
	}
	if _, err := tx.Exec(ctx, f.raiseH, resource, int64(token)); err != nil {
		return fmt.Errorf("pgfence: admit shared %q: %w", resource, err)
	}
	return nil
}

// lock makes sure resource has a row and reads its marks with read (one
// of the Fence's read or lock statements), in one round trip.
func (f *Fence) lock(ctx context.Context, tx pgx.Tx, read, resource string, token uint64) (h, e uint64, err error) {
	if token > math.MaxInt64 {
		return 0, 0, fmt.Errorf("%w: %d", ErrTokenRange, token)
	}
	var batch pgx.Batch
	batch.Queue(f.ensure, resource)
	batch.Queue(read, resource)
	br := tx.SendBatch(ctx, &batch)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return 0, 0, fmt.Errorf("pgfence: %q: %w", resource, err)
	}
	var hi, ei int64
	if err := br.QueryRow().Scan(&hi, &ei); err != nil {
		return 0, 0, fmt.Errorf("pgfence: %q: %w", resource, err)
	}
	return uint64(hi), uint64(ei), br.Close()
}
