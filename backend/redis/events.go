package redis

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Timing of the subscriber connection's health checks: after pingEvery of
// silence it sends a PING, and after silentLimit such periods in a row it
// replaces the connection (a server frozen or a connection silently lost
// answers nothing, but a write to it may still succeed).
const (
	pingEvery   = 2 * time.Second
	silentLimit = 3
	// cleanupTimeout bounds the calls a Backend makes on its own behalf:
	// removing the claim of a failed Acquire, reaping an ended lease.
	cleanupTimeout = 5 * time.Second
)

// subscribe opens a subscription to the Backend's events and the keyspace
// notifications of its leases, and waits for the server to confirm both.
func (b *Backend) subscribe(ctx context.Context) (*goredis.PubSub, error) {
	ps := b.newPubSub(ctx)
	for n := 0; n < 2; {
		msg, err := ps.Receive(ctx)
		if err != nil {
			_ = ps.Close()
			return nil, err
		}
		if _, ok := msg.(*goredis.Subscription); ok {
			n++
		}
	}
	return ps, nil
}

// newPubSub subscribes without waiting: a failure shows at the next
// Receive, and go-redis subscribes again on every new connection.
func (b *Backend) newPubSub(ctx context.Context) *goredis.PubSub {
	ps := b.c.Subscribe(ctx, b.lay.events())
	_ = ps.PSubscribe(ctx, b.lay.leaseSpace(b.db))
	return ps
}

// listen reads the subscription until ctx ends, dispatching events to the
// registry. A confirmation of a subscription after the first ones means
// the connection was replaced and events may have been lost meanwhile:
// every waiter then reads its queue again.
func (b *Backend) listen(ctx context.Context) {
	defer b.wg.Done()
	silent, backoff := 0, 10*time.Millisecond
	for {
		b.mu.Lock()
		ps, closed := b.ps, b.psClosed
		b.mu.Unlock()
		if closed {
			return
		}
		msg, err := ps.ReceiveTimeout(ctx, pingEvery)
		if ctx.Err() != nil {
			return
		}
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout():
			if silent++; silent >= silentLimit {
				b.replace(ctx, ps)
				silent = 0
			} else {
				_ = ps.Ping(ctx)
			}
		case err != nil:
			// go-redis reconnects at the next Receive; pause so that a
			// server that is down is not hammered.
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
		default:
			silent, backoff = 0, 10*time.Millisecond
			switch m := msg.(type) {
			case *goredis.Message:
				b.dispatch(m)
			case *goredis.Subscription:
				if m.Kind == "subscribe" || m.Kind == "psubscribe" {
					b.reg.resubscribed()
				}
			}
		}
	}
}

// replace closes a silent subscription and opens another.
func (b *Backend) replace(ctx context.Context, old *goredis.PubSub) {
	_ = old.Close()
	ps := b.newPubSub(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.psClosed {
		_ = ps.Close()
		return
	}
	b.ps = ps
}

// dispatch routes one message: a claim event, or the deletion or expiry of
// a lease.
func (b *Backend) dispatch(m *goredis.Message) {
	if m.Channel == b.lay.events() {
		what, rest, _ := strings.Cut(m.Payload, " ")
		tok, key, ok := strings.Cut(rest, " ")
		token, err := strconv.ParseUint(tok, 10, 64)
		if ok && err == nil && len(what) == 1 {
			b.reg.event(claimEvent{key: key, token: token}, what[0])
		}
		return
	}
	if m.Payload != "del" && m.Payload != "expired" {
		return
	}
	if id, ok := b.lay.leaseOf(m.Channel); ok {
		b.leaseGone(id)
	}
}
