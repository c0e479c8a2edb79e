package pgbackend_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// Keys, values and owners that would break SQL built from text are plain
// data: each is a lock of its own, shown back exactly, and the tables
// survive.
func TestHostileKeys(t *testing.T) {
	schema := uniqueSchema(t)
	c, _ := client(t, schema)
	ctx := testCtx(t, waitBound)
	keys := []string{
		`'`, `"`, `''`, `a'b`, `'; DROP TABLE claims; --`, `"; drop table ashlock.leases; --`,
		`\`, `\'`, `$1`, `$$`, `%s`, `%[1]s`, `:name`, `?`, `*`, `%`, `_`,
		`d1:k`, `日本語のキー`, `🔒`, `Ünïcödé`, `a b`, ` `, `ashlock:` + schema,
	}
	var guards []*ashlock.Guard
	for _, k := range keys {
		g, err := c.Lock(k).WithOwner(k).WithValue([]byte(k)).Acquire(ctx)
		require.NoError(t, err, "key %q", k)
		guards = append(guards, g)
	}
	for _, k := range keys {
		info, err := c.Inspect(ctx, k)
		require.NoError(t, err)
		require.True(t, info.Held, "key %q", k)
		assert.Equal(t, k, info.Owner)
		require.Len(t, info.Holders, 1)
		assert.Equal(t, k, string(info.Holders[0].Value))
	}
	// Distinct keys are distinct locks: a second try on each fails, on a
	// key that differs by a quote it succeeds.
	_, err := c.Lock(`'`).TryAcquire(ctx)
	require.ErrorIs(t, err, ashlock.ErrLocked)
	g, err := c.Lock(`''''`).TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, g.Unlock(ctx))
	for _, g := range guards {
		require.NoError(t, g.Unlock(ctx))
	}
	var n int
	require.NoError(t, pool(t, "check").QueryRow(ctx,
		fmt.Sprintf(`SELECT count(*) FROM %s.claims`, pgx.Identifier{schema}.Sanitize())).Scan(&n))
	assert.Zero(t, n)
}

// Schema names that are not plain identifiers are refused before any SQL
// is sent, by New and by a seed.
func TestHostileSchemaNames(t *testing.T) {
	p := pool(t, "hostile-schema")
	ctx := testCtx(t, waitBound)
	for _, name := range []string{
		"", `x"; DROP SCHEMA public CASCADE; --`, "a'b", "a b", "a.b", "Caps", "1st", "ünï", "a-b", "x;y",
		"a2345678901234567890123456789012345678901234567890123456",
	} {
		b, err := postgres.New(ctx, p, postgres.WithSchema(name))
		if b != nil {
			b.Close()
		}
		assert.ErrorIs(t, err, backend.ErrInvalidConfig, "schema %q", name)
		_, err = ashlock.Connect(ctx, ashlock.LockConfig{ClusterSeed: shared.URL(database(t)) + "&ashlock_schema=" + urlEscape(name)})
		assert.ErrorIs(t, err, ashlock.ErrInvalidConfig, "seed schema %q", name)
	}
	var public bool
	require.NoError(t, p.QueryRow(ctx, `SELECT to_regnamespace('public') IS NOT NULL`).Scan(&public))
	assert.True(t, public)
}

// A seed opens a client on the server, in the schema its ashlock_schema
// parameter names (pgx never sees the parameter), and both schemes work.
func TestSeed(t *testing.T) {
	schema := uniqueSchema(t)
	ctx := testCtx(t, waitBound)
	for _, scheme := range []string{"postgres", "postgresql"} {
		url := scheme + shared.URL(database(t))[len("postgres"):] + "&ashlock_schema=" + schema
		c, err := ashlock.Connect(ctx, ashlock.LockConfig{ClusterSeed: url})
		require.NoError(t, err, scheme)
		g, err := c.Lock("seeded").WithTTL(10 * time.Second).Acquire(ctx)
		require.NoError(t, err)
		var n int
		require.NoError(t, pool(t, "seed-check").QueryRow(ctx,
			fmt.Sprintf(`SELECT count(*) FROM %s.claims WHERE key = 'seeded'`, pgx.Identifier{schema}.Sanitize())).Scan(&n))
		assert.Equal(t, 1, n)
		require.NoError(t, g.Unlock(ctx))
		require.NoError(t, c.Close(context.Background()))
	}
	// Without the parameter the schema is "ashlock".
	c, err := ashlock.Connect(ctx, ashlock.LockConfig{ClusterSeed: shared.URL(database(t))})
	require.NoError(t, err)
	defer c.Close(context.Background())
	var exists bool
	require.NoError(t, pool(t, "seed-check").QueryRow(ctx, `SELECT to_regclass('ashlock.claims') IS NOT NULL`).Scan(&exists))
	assert.True(t, exists)
}

func urlEscape(s string) string {
	out := ""
	for _, b := range []byte(s) {
		out += fmt.Sprintf("%%%02X", b)
	}
	return out
}
