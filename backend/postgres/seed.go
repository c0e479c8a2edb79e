package postgres

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ash-lock/ashlock/backend"
)

// SchemaParam is the query parameter of a seed URL that names the schema
// (default DefaultSchema). It is removed before the URL reaches pgx.
const SchemaParam = "ashlock_schema"

func init() {
	backend.RegisterSeed("postgres", OpenSeed)
	backend.RegisterSeed("postgresql", OpenSeed)
}

// ParseSeed splits a seed, a libpq URL such as
//
//	postgres://app@db.example:5432/app?sslmode=verify-full&ashlock_schema=locks
//
// into the URL pgx gets (without SchemaParam) and the schema. It contacts
// nothing. Errors wrap backend.ErrInvalidConfig: not a postgres or
// postgresql URL, a schema given twice, or a bad schema name.
func ParseSeed(seed string) (connString, schema string, err error) {
	u, err := url.Parse(seed)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", "", fmt.Errorf("%w: postgres seed: want a postgres:// or postgresql:// URL", backend.ErrInvalidConfig)
	}
	q := u.Query()
	schema = DefaultSchema
	if v, ok := q[SchemaParam]; ok {
		if len(v) != 1 {
			return "", "", fmt.Errorf("%w: postgres seed: %s given %d times", backend.ErrInvalidConfig, SchemaParam, len(v))
		}
		schema = v[0]
		q.Del(SchemaParam)
		u.RawQuery = q.Encode()
	}
	if err := checkSchema(schema); err != nil {
		return "", "", err
	}
	return u.String(), schema, nil
}

// OpenSeed is the backend.SeedOpener registered for the postgres and
// postgresql schemes: it opens a pgxpool.Pool on the seed (see ParseSeed)
// and a Backend on it; closeAll closes both.
func OpenSeed(ctx context.Context, seed string) (backend.Backend, func() error, error) {
	conn, schema, err := ParseSeed(seed)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: postgres seed: %w", backend.ErrInvalidConfig, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: postgres seed: %w", backend.ErrUnavailable, err)
	}
	b, err := New(ctx, pool, WithSchema(schema))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return b, func() error {
		err := b.Close()
		pool.Close()
		return err
	}, nil
}
