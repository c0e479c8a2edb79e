package pgbackend_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// A role with rights on its own schema alone (no CREATE on the database)
// can start the backend, which creates its tables there; and a role that
// may only use those tables (USAGE and DML grants, as the README lists)
// can start it too and take locks.
func TestRoleWithItsSchemaAlone(t *testing.T) {
	schema := uniqueSchema(t)
	db := database(t)
	admin := pool(t, "admin")
	ctx := testCtx(t, waitBound)
	owner, user := schema+"_owner", schema+"_user"
	for _, stmt := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN", pgx.Identifier{owner}.Sanitize()),
		fmt.Sprintf("CREATE ROLE %s LOGIN", pgx.Identifier{user}.Sanitize()),
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
		fmt.Sprintf("REVOKE CREATE ON DATABASE %s FROM PUBLIC", pgx.Identifier{db}.Sanitize()),
		fmt.Sprintf("CREATE SCHEMA %s AUTHORIZATION %s", pgx.Identifier{schema}.Sanitize(), pgx.Identifier{owner}.Sanitize()),
	} {
		_, err := admin.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	as := func(role string) *pgxpool.Pool {
		return shared.Pool(t, db, role, func(c *pgxpool.Config) { c.ConnConfig.User = role })
	}
	start := func(role string) {
		t.Helper()
		b, err := postgres.New(ctx, as(role), postgres.WithSchema(schema))
		require.NoError(t, err, role)
		defer b.Close()
		l, err := b.Grant(ctx, time.Minute)
		require.NoError(t, err)
		c, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", ID: role, Lease: l.ID, Owner: role, Wait: true, Fair: true})
		require.NoError(t, err, role)
		require.NoError(t, b.Release(ctx, c))
		require.NoError(t, b.Revoke(ctx, l.ID))
	}
	start(owner)

	s, u := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{user}.Sanitize()
	for _, stmt := range []string{
		fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s", s, u),
		fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %s TO %s", s, u),
		fmt.Sprintf("GRANT USAGE ON ALL SEQUENCES IN SCHEMA %s TO %s", s, u),
	} {
		_, err := admin.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	start(user)
}
