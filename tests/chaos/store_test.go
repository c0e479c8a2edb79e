package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// A store is what a run keeps its locks in: a three-member etcd cluster
// (store_etcd_test.go), a PostgreSQL server (store_pg_test.go) or a Redis
// server (store_redis_test.go). The
// workloads, the holders in this process and in children, the clock and
// every check are the same whatever the store; a store supplies only:
//
//   - how a holder reaches it: a route of its own (newRoute), whose
//     endpoint a child receives in its config, and from which openConn
//     opens Backends and the mutex workload's register;
//   - where that register lives, and its record of applied writes
//     (initRegister, registerRecord): a key in etcd written with a Txn
//     guarded by the claim's ownership comparison, a row in PostgreSQL
//     written in a transaction that passed the Backend's Fence, a Redis
//     key written by a script that first checks the claim holds;
//   - the faults it can inject: its own (serverFault, one at a time) and
//     the revocation of a claim's lease (revokeLease), as an operator
//     would; the client faults act on routes, and the freezes on
//     children, whatever the store;
//   - the claims left at the end (leftovers).
//
// Adding a store is one file of these, and its fault kinds in
// schedule_test.go.
type store interface {
	// newRoute starts a holder's own way to the store, named name.
	newRoute(name string) (route, error)
	// inspector returns a Backend on the store's admin connection, under
	// prefix, for Inspect; the caller closes it.
	inspector(ctx context.Context, prefix string) (backend.Backend, error)
	// initRegister creates the register called name holding 0, and
	// returns where its record starts.
	initRegister(ctx context.Context, name string) (from int64, err error)
	// registerRecord returns every write applied to the register since
	// from, in the store's order, leaving out the initial one.
	registerRecord(ctx context.Context, name string, from int64) ([]applied, error)
	// revokeLease ends, as an operator would, the lease of the claim with
	// token at key, and describes the lease; found is false if no such
	// claim was there any more.
	revokeLease(ctx context.Context, prefix, key string, token uint64) (lease string, found bool, err error)
	// serverFault injects f, a fault of the store's own (clusterFault),
	// and returns what it counts it as and how to undo it (nil: nothing
	// was injected).
	serverFault(ctx context.Context, f fault, logf func(string, ...any)) (kind string, undo func() error, err error)
	// leftovers lists the claims left under prefix.
	leftovers(ctx context.Context, prefix string) ([]string, error)
	// close stops the store; call it after every route is closed.
	close() error
}

// Stores, as runConfig and endpoint name them.
const (
	storeEtcd     = ""
	storePostgres = "postgres"
	storeRedis    = "redis"
)

// launchStore starts the store called name.
func launchStore(ctx context.Context, name string) (store, error) {
	switch name {
	case storeEtcd:
		return launchEtcd(ctx)
	case storePostgres:
		return launchPostgres(ctx)
	case storeRedis:
		return launchRedis(ctx)
	}
	return nil, fmt.Errorf("no store %q", name)
}

// endpoint is how one holder reaches the store through its route: what a
// child needs, in its config, to open its connection.
type endpoint struct {
	Store     string   `json:"store,omitempty"`
	Endpoints []string `json:"endpoints,omitempty"` // etcd: the route's proxies
	DSN       string   `json:"dsn,omitempty"`       // PostgreSQL: through the route's proxy
	Addr      string   `json:"addr,omitempty"`      // Redis: the route's proxy
	Name      string   `json:"name,omitempty"`      // Redis: the client name of the holder's connections
}

// route is one holder's own way to the store, so that client faults can
// be put between that holder and the store without touching anyone else.
// Methods are safe for concurrent use.
type route interface {
	endpoint() endpoint
	// blackhole stops all traffic of the route, both ways, until heal.
	blackhole()
	// delay holds every chunk of data d each way, until heal (etcd only:
	// the schedule draws client delays for etcd alone).
	delay(d time.Duration)
	heal()
	// close stops the route; call it after the connections using it are
	// closed. It is idempotent.
	close() error
}

// terminator is a route whose holder's connections the server can end
// (PostgreSQL's pg_terminate_backend, Redis's CLIENT KILL).
type terminator interface {
	terminate(ctx context.Context) (int, error)
}

// conn is one holder's connection to the store, through its route.
type conn interface {
	// newBackend opens a Backend under prefix; the caller closes it
	// before the conn.
	newBackend(ctx context.Context, prefix string) (backend.Backend, error)
	// register returns the register called name as a holder on be sees
	// it: reads and writes take effect only while the holder's claim on
	// key holds, unless unguarded (the negative control).
	register(be backend.Backend, name, key string, unguarded bool) register
	close() error
}

// register is the mutex workload's register in the store, as one holder
// reads and writes it.
type register interface {
	// read reads the register if hd's claim still holds; an error is an
	// unknown outcome.
	read(ctx context.Context, hd held) (int64, status)
	// write writes value with tag if hd's claim still holds.
	write(ctx context.Context, hd held, value int64, tag string) status
}

// openConn opens a holder's connection to the store ep names.
func openConn(ctx context.Context, ep endpoint) (conn, error) {
	switch ep.Store {
	case storeEtcd:
		return openEtcdConn(ep)
	case storePostgres:
		return openPgConn(ctx, ep)
	case storeRedis:
		return openRedisConn(ep), nil
	}
	return nil, fmt.Errorf("no store %q", ep.Store)
}
