package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// listenConn opens the Backend's listener connection and subscribes it to
// the schema's channel.
func (b *Backend) listenConn(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, b.listenCfg.Copy())
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
// and observer reads again once and every holder's claim is checked once:
// the notifications sent meanwhile are lost.
func (b *Backend) listen(ctx context.Context, conn *pgx.Conn) {
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
		b.hub.wakeAll()
	}()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err == nil {
			if e, ok := parseEvent(n.Payload); ok {
				for _, c := range b.hub.dispatch(e) {
					c.call()
				}
			}
			continue
		}
		conn.Close(context.Background())
		conn = nil
		if ctx.Err() != nil {
			return
		}
		if conn = b.reconnect(ctx); conn == nil {
			return
		}
		for _, c := range b.hub.resync() {
			b.spawn(func() { b.verify(ctx, c) })
		}
	}
}

// reconnect opens a new listener connection, trying again with backoff
// until it succeeds or ctx ends (then it returns nil).
func (b *Backend) reconnect(ctx context.Context) *pgx.Conn {
	for d := minBackoff; ; d = min(2*d, maxBackoff) {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		conn, err := b.listenConn(cctx)
		cancel()
		if err == nil {
			return conn
		}
	}
}

// verify checks once that a held claim still has every row, after the
// listener missed events; a claim found gone is lost. A check that cannot
// reach the server is tried again, with backoff, until ctx ends: the
// client's own lease deadline covers the meantime.
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
