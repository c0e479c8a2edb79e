package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// listenConn opens the Backend's listener connection and subscribes it to
// the schema's channel.
func (b *Backend) listenConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := b.listenCfg.Copy()
	// pgx buffers notifications for WaitForNotification only when the
	// config has no handler of its own; with the application's handler
	// (set for its own pool) the listener would get none, and a nil one.
	cfg.OnNotification = nil
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel(b.schema)}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// Reconnection backoff of the listener.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = time.Second
)

// listen delivers the channel's notifications until ctx ends. When the
// connection fails it connects again, with backoff, and then every waiter
// reads again once, every observer resumes from a read of its key's queue
// (see rejoin) and every claim held or being acquired is checked once:
// the notifications sent meanwhile are lost.
//
// A connection can also die without a reset ever reaching us (a NAT or
// firewall that forgot it, a failover, a partition that drops rather than
// delays): a read then waits until TCP keepalive gives up, minutes later,
// and every notification meanwhile is lost, holders' losses and waiters'
// turns with them. So after b.ping without a notification listen checks
// the connection (see alive), and one that fails the check is taken as
// lost since it last answered.
func (b *Backend) listen(ctx context.Context, conn *pgx.Conn) {
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
		b.hub.wakeAll()
	}()
	heard := time.Now() // when conn last proved alive
	for {
		wctx, cancel := context.WithTimeout(ctx, b.ping)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		lost := time.Now()
		switch {
		case err == nil:
			heard = lost
			if e, ok := parseEvent(n.Payload); ok {
				for _, c := range b.hub.dispatch(e) {
					c.call()
				}
			}
			continue
		case ctx.Err() == nil && pgconn.Timeout(err):
			// Only wctx ended: pgx leaves the connection usable.
			if err = b.alive(ctx, conn); err == nil {
				heard = time.Now()
				continue
			}
			lost = heard // what the server sent since may be gone
		}
		conn.Close(context.Background())
		conn = nil
		if ctx.Err() != nil {
			return
		}
		var snaps map[string]*snapshot
		if conn, snaps = b.rejoin(ctx); conn == nil {
			return
		}
		heard = time.Now()
		for _, c := range b.hub.resync(snaps, lost) {
			b.spawn(func() { b.verify(ctx, c) })
		}
		if b.onGap != nil {
			b.onGap(lost, time.Now())
		}
	}
}

// alive sends conn the cheapest round trip there is, an empty query (no
// transaction, no plan), and returns an error unless the server answers
// within b.ping. A notification that comes first is kept by pgx for the
// next wait.
func (b *Backend) alive(ctx context.Context, conn *pgx.Conn) error {
	pctx, cancel := context.WithTimeout(ctx, b.ping)
	defer cancel()
	return conn.Ping(pctx)
}

// reconnect opens a new listener connection, trying again with backoff
// (from *d, which it leaves at the next delay) until it succeeds or ctx
// ends (then it returns nil).
func (b *Backend) reconnect(ctx context.Context, d *time.Duration) *pgx.Conn {
	for {
		t := time.NewTimer(*d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		*d = min(2*(*d), maxBackoff)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		conn, err := b.listenConn(cctx)
		cancel()
		if err == nil {
			return conn
		}
	}
}

// rejoin reconnects the listener (see reconnect) and reads, on the new
// connection, the queues of the keys observed: a read after LISTEN and
// before the notifications that follow it, from which observers resume.
// A failed read is a failed connection: it connects again. It returns a
// nil connection once ctx has ended.
func (b *Backend) rejoin(ctx context.Context) (*pgx.Conn, map[string]*snapshot) {
	d := minBackoff
	for {
		conn := b.reconnect(ctx, &d)
		if conn == nil {
			return nil, nil
		}
		keys := b.hub.observed()
		snaps := make(map[string]*snapshot, len(keys))
		if len(keys) == 0 {
			return conn, snaps
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		read, err := scanSnapshots(conn.Query(qctx, b.sql.observe, keys))
		cancel()
		if err == nil {
			for _, k := range keys {
				if snaps[k] = read[k]; snaps[k] == nil {
					snaps[k] = &snapshot{} // never claimed
				}
			}
			return conn, snaps
		}
		conn.Close(context.Background())
	}
}

// verify checks once that a claim held or being acquired still has every
// row, after the listener missed events; a claim found gone is lost (its
// Acquire, if it has not returned, then fails: see promote). A check that
// cannot reach the server is tried again, with backoff, until ctx ends:
// the client's own lease deadline covers the meantime.
func (b *Backend) verify(ctx context.Context, c *holding) {
	keys := make([]string, len(c.refs))
	for i, r := range c.refs {
		keys[i] = r.key
	}
	for d := minBackoff; ; d = min(2*d, maxBackoff) {
		var n int
		qctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		err := b.pool.QueryRow(qctx, b.sql.verify, keys, c.refs[0].token, c.name).Scan(&n)
		cancel()
		switch {
		case err == nil && n == len(keys):
			return
		case err == nil:
			if call, ok := b.hub.lose(c); ok {
				call.call()
			}
			return
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
