package pgtest

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// StartTimeout bounds how long Start and WithShared wait for the server,
// and RestartT for a restart.
const StartTimeout = 60 * time.Second

// Start starts a server for the test and stops it in t.Cleanup, failing
// the test if it is not ready within StartTimeout.
func Start(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	s, err := Launch(ctx)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// RestartT crashes and restarts the server (see Restart), failing the
// test if it is not ready within StartTimeout.
func (s *Server) RestartT(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("pgtest: restart: %v", err)
	}
}

var dbSeq atomic.Int64

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDatabase creates a fresh database for the test, named after it, and
// returns its name. It is left in place: the server's directory goes at
// the end.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("t%d_%s", dbSeq.Add(1), name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.CreateDatabase(ctx, name); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	return name
}

// Pool returns a pool on database db with application name app (see
// Terminate), closed in t.Cleanup. configure, when non-nil, may change the
// pool's config first.
func (s *Server) Pool(t testing.TB, db, app string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(s.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// WithShared wraps a test binary's M: Run starts a server, stores it in
// *Shared for the package's tests, runs them and stops the server before
// returning. Pass it to goleak.VerifyTestMain so that the leak check runs
// with the server gone:
//
//	var shared *pgtest.Server
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(pgtest.WithShared{M: m, Shared: &shared})
//	}
type WithShared struct {
	M      *testing.M
	Shared **Server
	// Settings are extra server settings for Launch.
	Settings []string
}

// Run implements goleak's TestingM. It returns 1 without running any test
// if the server does not start within StartTimeout.
func (w WithShared) Run() int {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	s, err := Launch(ctx, w.Settings...)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*w.Shared = s
	defer s.Close()
	return w.M.Run()
}

// ProxyT starts a proxy in front of the server (see NewProxy), closed in
// t.Cleanup.
func (s *Server) ProxyT(t testing.TB) *Proxy {
	t.Helper()
	p, err := s.NewProxy()
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
