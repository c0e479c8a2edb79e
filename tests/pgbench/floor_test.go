package pgbench_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/postgres"
)

// schema is the schema every implementation uses, each in a database of
// its own.
const schema = "ashlock"

// benchTTL is the lease TTL of the ashlock clients, which renew it.
const benchTTL = 30 * time.Second

// floorTTL is the lease TTL of the floor's clients, which send no
// renewals (ashlock's are not counted either): longer than any run.
const floorTTL = 24 * time.Hour

// newDatabase creates a fresh database with backend/postgres's tables in
// schema (New creates them, then is closed) and returns its name.
func newDatabase(b testing.TB) string {
	b.Helper()
	db := shared.NewDatabase(b)
	ctx, cancel := callCtx()
	defer cancel()
	p := shared.Pool(b, db, "setup", nil)
	be, err := postgres.New(ctx, p, postgres.WithSchema(schema))
	if err != nil {
		b.Fatalf("postgres.New: %v", err)
	}
	be.Close()
	p.Close()
	return db
}

// quiet drops the client's log records: a benchmark that poisons guards
// on purpose would otherwise print a warning for each.
var quiet = slog.New(slog.DiscardHandler)

// newAshlock returns a root client on a Backend of its own in database
// db, on a pool whose statements ctr counts; everything is closed in
// b.Cleanup.
func newAshlock(b testing.TB, db, app string, ctr *counter) *ashlock.LockClient {
	b.Helper()
	c, closeAll := openAshlock(b, db, app, ctr)
	b.Cleanup(closeAll)
	return c
}

// openAshlock is newAshlock, with the client and its Backend closed by
// the function it returns (the pool still in b.Cleanup).
func openAshlock(b testing.TB, db, app string, ctr *counter) (*ashlock.LockClient, func()) {
	b.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	be, err := postgres.New(ctx, newPool(b, db, app, ctr), postgres.WithSchema(schema))
	if err != nil {
		b.Fatalf("postgres.New: %v", err)
	}
	c, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: benchTTL, Logger: quiet}, be)
	if err != nil {
		be.Close()
		b.Fatalf("ConnectWith: %v", err)
	}
	return c, func() {
		c.Close(context.Background())
		be.Close()
	}
}

// floorClient sends backend/postgres's statements for an exclusive lock by
// hand on one connection, with no pool, client, lease renewal or guard
// around them: the least any client of that protocol does. It waits for
// its wake-ups on a listening connection, its own or that one.
type floorClient struct {
	conn     *pgx.Conn
	listener *pgx.Conn // where it waits for wake-ups: conn, or one of its own
	sql      floorSQL
	keys     []string
	key      string
	name     string
	lease    int64
}

// How a floor client waits for its wake-ups.
type listenMode int

const (
	noListen     listenMode = iota // it never waits
	listenOnConn                   // on the connection it sends its statements on
	listenApart                    // on a connection of its own, as a Backend does
	// listenIdle: it never waits, but a connection of its own listens
	// and reads every notification, as a Backend's listener does to learn
	// of the loss of a claim it holds.
	listenIdle
)

// newFloorClient connects to db (counted by ctr), listens on the schema's
// channel as mode says, and grants its lease.
func newFloorClient(b testing.TB, db, app string, ctr *counter, key, name string, mode listenMode) *floorClient {
	b.Helper()
	f := &floorClient{conn: newConn(b, db, app, ctr), sql: floorStatements(b), keys: []string{key}, key: key, name: name}
	f.listener = f.conn
	if mode == listenApart || mode == listenIdle {
		f.listener = newConn(b, db, app+"-listener", ctr)
	}
	ctx, cancel := callCtx()
	defer cancel()
	if mode != noListen {
		if _, err := f.listener.Exec(ctx, "LISTEN "+pgx.Identifier{"ashlock:" + schema}.Sanitize()); err != nil {
			b.Fatal(err)
		}
	}
	if mode == listenIdle {
		drain(b, f.listener)
	}
	if err := f.conn.QueryRow(ctx, f.sql.grant, floorTTL.Microseconds()).Scan(&f.lease); err != nil {
		b.Fatal(err)
	}
	return f
}

// drain reads conn's notifications until b's cleanup, which waits for it
// to stop before the connection is closed (cleanups run last in, first
// out).
func drain(b testing.TB, conn *pgx.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := conn.WaitForNotification(ctx); err != nil {
				return
			}
		}
	}()
	b.Cleanup(func() {
		cancel()
		<-done
	})
}

// row is one row of readQueue.
type row struct {
	key        string
	token      int64
	name       string
	lease      int64
	shared     bool
	permits    int
	permit     int
	admitted   bool
	acquiredAt *time.Time
	remaining  int64
}

func scanRows(rows pgx.Rows, err error) ([]row, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.key, &r.token, &r.name, &r.lease, &r.shared, &r.permits, &r.permit,
			&r.admitted, &r.acquiredAt, &r.remaining); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// enqueue sends the enqueue batch of a fair exclusive request and returns
// the claim's token and the queue it read.
func (f *floorClient) enqueue(ctx context.Context) (token int64, q []row, err error) {
	var batch pgx.Batch
	batch.Queue(f.sql.lockKeys, f.keys)
	batch.Queue(f.sql.bumpToken, f.keys)
	batch.Queue(f.sql.reapSkip, f.keys)
	batch.Queue(f.sql.insert, f.keys, f.lease, f.name, false, 1,
		"floor", []byte(nil), []string(nil), true, []int64(nil), false, 0)
	batch.Queue(f.sql.readQueue, f.keys)
	batch.Queue(f.sql.status, f.lease)
	br := f.conn.SendBatch(ctx, &batch)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	for range 3 {
		if _, err := br.Exec(); err != nil {
			return 0, nil, err
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return 0, nil, err
	}
	if tag.RowsAffected() != 1 {
		return 0, nil, errors.New("floor: the claim was not inserted")
	}
	if q, err = scanRows(br.Query()); err != nil {
		return 0, nil, err
	}
	var live bool
	if err := br.QueryRow().Scan(&live); err != nil {
		return 0, nil, err
	}
	if !live {
		return 0, nil, errors.New("floor: lease not live")
	}
	for _, r := range q {
		if r.name == f.name {
			token = r.token
		}
	}
	return token, q, nil
}

// acquire takes the lock: the enqueue batch; then, while a claim is ahead,
// a wait for the delete of the claim just ahead (the notification only)
// and a read of the queue; then, unless the claim held at once, its
// admission. It returns the claim's token.
func (f *floorClient) acquire(ctx context.Context) (int64, error) {
	token, q, err := f.enqueue(ctx)
	if err != nil {
		return 0, err
	}
	for {
		i := -1
		for j, r := range q {
			if r.token == token && r.name == f.name {
				i = j
			}
		}
		switch {
		case i < 0:
			return 0, errors.New("floor: the claim vanished")
		case i == 0 && q[0].admitted:
			return token, nil
		case i == 0:
			return token, f.admit(ctx, token)
		}
		for ahead := q[i-1].token; ; {
			n, err := f.listener.WaitForNotification(ctx)
			if err != nil {
				return 0, err
			}
			if deletes(n.Payload, f.key, ahead) {
				break
			}
		}
		if q, err = scanRows(f.conn.Query(ctx, f.sql.readQueue, f.keys)); err != nil {
			return 0, err
		}
	}
}

// deletes reports whether payload, a notification of backend/postgres's
// triggers, is the delete of the claim of key with token, as the
// Backend's listener reads it.
func deletes(payload, key string, token int64) bool {
	var p struct {
		Kind string  `json:"e"`
		Key  string  `json:"k"`
		Gone []int64 `json:"ts"`
	}
	return json.Unmarshal([]byte(payload), &p) == nil && p.Kind == "d" && p.Key == key && slices.Contains(p.Gone, token)
}

func (f *floorClient) admit(ctx context.Context, token int64) error {
	rows, err := f.conn.Query(ctx, f.sql.admit, f.keys, token, f.name, 0, f.lease)
	if err != nil {
		return err
	}
	n := 0
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			rows.Close()
			return err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n != 1 {
		return errors.New("floor: admission found no claim")
	}
	return nil
}

func (f *floorClient) release(ctx context.Context, token int64) error {
	tag, err := f.conn.Exec(ctx, f.sql.release, f.keys, token, f.name)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("floor: release deleted %d rows", tag.RowsAffected())
	}
	return err
}

// advisoryKey is the advisory lock every advisory implementation takes.
const advisoryKey = 42

// advisoryLock blocks in pg_advisory_lock on conn.
func advisoryLock(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(advisoryKey))
	return err
}

// advisoryUnlock gives the lock back on conn.
func advisoryUnlock(ctx context.Context, conn *pgx.Conn) error {
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", int64(advisoryKey)).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errors.New("advisory: the lock was not held")
	}
	return nil
}
