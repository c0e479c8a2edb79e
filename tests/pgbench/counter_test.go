package pgbench_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// counter counts what the connections it traces send: statements (each
// statement of a batch counted), round trips (a batch is one), lease
// renewals apart (they are per lease and interval, not per lock), and the
// pool's liveness pings (a round trip before a connection idle for over
// a second is handed out, which no tracer sees; one before a renewal is
// counted with the renewals). Safe for concurrent use.
type counter struct {
	stmts, roundTrips, renewals, pings atomic.Int64
	reaps                              atomic.Int64 // among stmts: see reap

	mu        sync.Mutex
	pinged    map[*pgx.Conn]bool // a ping not yet attributed to a statement
	recording bool               // see record
	recorded  []string
}

// record starts (on) or stops keeping the text of every statement sent,
// renewals excepted, in the order sent (a batch's one by one); stopping
// returns what was kept.
func (c *counter) record(on bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.recorded
	c.recording, c.recorded = on, nil
	return out
}

func (c *counter) keep(sql ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recording {
		c.recorded = append(c.recorded, sql...)
	}
}

// counts is a snapshot of a counter.
type counts struct{ stmts, roundTrips, renewals, pings, reaps int64 }

func (c *counter) snapshot() counts {
	return counts{c.stmts.Load(), c.roundTrips.Load(), c.renewals.Load(), c.pings.Load(), c.reaps.Load()}
}

func (a counts) sub(b counts) counts {
	return counts{a.stmts - b.stmts, a.roundTrips - b.roundTrips, a.renewals - b.renewals, a.pings - b.pings, a.reaps - b.reaps}
}

// renewal is what the backend's lease renewal statement says (and no
// other).
const renewal = ".leases SET expires_at = clock_timestamp() + ttl"

// reap is what the backend's statement says that a waiter sends when the
// lease of the claim it waits for should have expired by its timer (set
// from the time the lease had left when the waiter read the queue): a
// wake-up that no event caused.
const reap = ".leases WHERE id = ANY($1) AND expires_at < clock_timestamp()"

// takePing reports whether conn was pinged before this statement.
func (c *counter) takePing(conn *pgx.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pinged[conn]
	delete(c.pinged, conn)
	return p
}

func (c *counter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	pinged := c.takePing(conn)
	if strings.Contains(d.SQL, renewal) {
		c.renewals.Add(1)
		return ctx
	}
	if pinged {
		c.pings.Add(1)
	}
	if strings.Contains(d.SQL, reap) {
		c.reaps.Add(1)
	}
	c.keep(d.SQL)
	c.stmts.Add(1)
	c.roundTrips.Add(1)
	return ctx
}

func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *counter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	if c.takePing(conn) {
		c.pings.Add(1)
	}
	for _, q := range d.Batch.QueuedQueries {
		c.keep(q.SQL)
	}
	c.stmts.Add(int64(d.Batch.Len()))
	c.roundTrips.Add(1)
	return ctx
}

func (c *counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// shouldPing is pgxpool's default rule (ping a connection idle for over a
// second), noted for the statement that follows.
func (c *counter) shouldPing(_ context.Context, p pgxpool.ShouldPingParams) bool {
	if p.IdleDuration <= time.Second {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pinged == nil {
		c.pinged = make(map[*pgx.Conn]bool)
	}
	c.pinged[p.Conn] = true
	return true
}

// newPool returns a pool on database db whose connections ctr counts,
// closed in b.Cleanup.
func newPool(b testing.TB, db, app string, ctr *counter) *pgxpool.Pool {
	b.Helper()
	return shared.Pool(b, db, app, func(c *pgxpool.Config) {
		c.ConnConfig.Tracer = ctr
		c.ShouldPing = ctr.shouldPing
	})
}

// newConn returns one connection to database db that ctr counts, closed
// in b.Cleanup.
func newConn(b testing.TB, db, app string, ctr *counter) *pgx.Conn {
	b.Helper()
	cfg, err := pgx.ParseConfig(shared.DSN(db))
	if err != nil {
		b.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	cfg.Tracer = ctr
	ctx, cancel := callCtx()
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// reportCounts reports what a counter saw per unit of work between two
// snapshots, under prefix (an implementation's name and "-", or ""):
// "stmts/<unit>", "roundtrips/<unit>" and, if any, "pings/<unit>" and
// "reaps/<unit>" (timer wake-ups, whose statements stmts counts).
func reportCounts(b *testing.B, prefix string, d counts, n float64, unit string) {
	if n <= 0 {
		return
	}
	b.ReportMetric(float64(d.stmts)/n, prefix+"stmts/"+unit)
	b.ReportMetric(float64(d.roundTrips+d.pings)/n, prefix+"roundtrips/"+unit)
	if d.pings > 0 {
		b.ReportMetric(float64(d.pings)/n, prefix+"pings/"+unit)
	}
	if d.reaps > 0 {
		b.ReportMetric(float64(d.reaps)/n, prefix+"reaps/"+unit)
	}
}
