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

// Timing of the subscriber connection's health checks: it sends a PING
// every pingEvery, and replaces the connection when silentLimit of them in
// a row have had no answer by the next (a server frozen or a connection
// silently lost answers nothing, but a write to it may still succeed).
const (
	pingEvery   = 2 * time.Second
	silentLimit = 3
	// cleanupTimeout bounds the calls a Backend makes on its own behalf:
	// removing the claim of a failed Acquire, reaping an ended lease.
	cleanupTimeout = 5 * time.Second
)

// subscribe opens the subscriber connection with the keyspace
// notifications of the Backend's leases, and waits for the server to
// confirm them. The channels of claims and keys are added as waiters need
// them (see subs.go).
func (b *Backend) subscribe(ctx context.Context) (*goredis.PubSub, error) {
	ps := b.newPubSub(ctx, nil)
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			_ = ps.Close()
			return nil, err
		}
		if s, ok := msg.(*goredis.Subscription); ok && s.Kind == "psubscribe" {
			return ps, nil
		}
	}
}

// newPubSub subscribes to channels (after the layout's routeChannels) and
// then to the notifications of leases, without waiting: a failure shows
// at the next Receive, and go-redis subscribes again on every new
// connection, the channels before the pattern, so that the pattern's
// confirmation follows them.
func (b *Backend) newPubSub(ctx context.Context, channels []string) *goredis.PubSub {
	ps := b.c.Subscribe(ctx, append(append(b.lay.routeChannels(), b.own), channels...)...)
	_ = ps.PSubscribe(ctx, b.lay.leaseSpace(b.db))
	return ps
}

// pubSub returns the current subscription, nil once closed.
func (b *Backend) pubSub() *goredis.PubSub {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.psClosed {
		return nil
	}
	return b.ps
}

// sender is the registry's subscriber: it sends on the Backend's current
// subscription. Errors are left to the listener: the connection is then
// broken, and once go-redis has made a new one, with every channel
// subscribed again, every waiter reads again.
type sender struct{ b *Backend }

func (s sender) subscribe(channels []string, ping uint64) {
	if ps := s.b.pubSub(); ps != nil {
		// A SUBSCRIBE that fails to be written makes go-redis replace the
		// connection and subscribe the new one to the channels it knew
		// before this call, not to these, which it adds only afterwards:
		// the PING below would then confirm channels nobody hears. Sent
		// again, they go on the new connection (or, should that fail too,
		// are among the channels its replacement subscribes).
		if err := ps.Subscribe(context.Background(), channels...); err != nil {
			_ = ps.Subscribe(context.Background(), channels...)
		}
		_ = ps.Ping(context.Background(), strconv.FormatUint(ping, 10))
	}
}

func (s sender) unsubscribe(channels []string) {
	if ps := s.b.pubSub(); ps != nil {
		_ = ps.Unsubscribe(context.Background(), channels...)
	}
}

func (s sender) ping(seq uint64) {
	if ps := s.b.pubSub(); ps != nil {
		_ = ps.Ping(context.Background(), strconv.FormatUint(seq, 10))
	}
}

// listen reads the subscription until ctx ends, dispatching events to the
// registry. A confirmation of the pattern after the first one means the
// connection was replaced and events may have been lost meanwhile: every
// waiter and observer then reads its queue again.
//
// What the listener cannot account for breaks the stream as a lost
// connection does: an error other than a read's timeout, or an answer to
// a ping it never sent. A read that times out in the middle of a reply
// (its first bytes came, the rest was held up past the deadline) leaves
// go-redis reading from inside it, and the rest then parses as bulk
// strings - pongs - silently, the message lost; every ping is numbered so
// that this shows. go-redis replaces a connection only when it finds it
// broken, so the listener replaces it itself, once its backoff is over.
func (b *Backend) listen(ctx context.Context) {
	defer b.wg.Done()
	silent, backoff := 0, 10*time.Millisecond
	tick := time.Now().Add(pingEvery)
	for {
		ps := b.pubSub()
		if ps == nil {
			return
		}
		if time.Until(tick) <= 0 {
			tick = time.Now().Add(pingEvery)
			if silent >= silentLimit {
				b.replace(ctx, ps)
				silent = 0
				continue
			}
			b.reg.healthPing()
			silent++
		}
		msg, err := ps.ReceiveTimeout(ctx, max(time.Until(tick), time.Millisecond))
		if ctx.Err() != nil {
			return
		}
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout():
		case err != nil:
			if !b.distrust(ctx, ps, &backoff) {
				return
			}
			silent = 0
		default:
			switch m := msg.(type) {
			case *goredis.Message:
				b.dispatch(m)
			case *goredis.Pong:
				silent = 0
				seq, err := strconv.ParseUint(m.Payload, 10, 64)
				if err != nil || !b.reg.pong(seq) {
					if !b.distrust(ctx, ps, &backoff) {
						return
					}
					continue
				}
				// A round trip made: the stream is whole again.
				backoff = 10 * time.Millisecond
			case *goredis.Subscription:
				// The pattern is subscribed again last on a new
				// connection (the first one's confirmation was taken by
				// subscribe).
				if m.Kind == "psubscribe" {
					b.reg.resubscribed()
					b.reg.reconfirm()
				}
			}
		}
	}
}

// distrust ends a stream that may have lost messages: the gap starts now
// (observers drop what arrives until it ends), and once backoff is over
// (a server that is down is not hammered) a new connection replaces ps.
// It reports false if ctx ended first.
func (b *Backend) distrust(ctx context.Context, ps *goredis.PubSub, backoff *time.Duration) bool {
	b.reg.gapStarted()
	t := time.NewTimer(*backoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	*backoff = min(2**backoff, time.Second)
	b.replace(ctx, ps)
	return true
}

// replace closes a subscription, silent or not to be trusted, and opens
// another, with the channels the old one had. Under the registry's subMu,
// so that no channel is added to or dropped from the old one meanwhile.
func (b *Backend) replace(ctx context.Context, old *goredis.PubSub) {
	b.reg.subMu.Lock()
	defer b.reg.subMu.Unlock()
	_ = old.Close()
	b.reg.gapStarted()
	ps := b.newPubSub(ctx, b.reg.subscribed())
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.psClosed {
		_ = ps.Close()
		return
	}
	b.ps = ps
}

// dispatch routes one message: a claim event, or the deletion, expiry or
// eviction of a lease (a server short of memory with a volatile-* policy
// evicts the keys that expire, and the leases are those).
func (b *Backend) dispatch(m *goredis.Message) {
	if m.Pattern == "" {
		if m.Channel == b.own {
			if id, e, head, recorded, ok := parseBehindMessage(m.Payload); ok {
				b.reg.behind(id, e, head, recorded)
			}
			return
		}
		if key, ok := strings.CutPrefix(m.Channel, b.lay.tag+"k:"); ok {
			km, err := parseKeyMessage(m.Payload)
			if err != nil {
				b.log.Warn("redis: malformed event of a key; its observers read it again", "key", key, "error", err)
				b.reg.resyncKey(key)
				return
			}
			b.reg.keyMessage(key, km)
			return
		}
		if e, what, head, recorded, ok := parseClaimMessage(m.Payload); ok {
			b.reg.event(e, what, head, recorded)
		}
		return
	}
	if m.Payload != "del" && m.Payload != "expired" && m.Payload != "evicted" {
		return
	}
	if id, ok := b.lay.leaseOf(m.Channel); ok {
		b.leaseGone(id)
	}
}

// parseBehindMessage reads a message of the Backend's own channel (see
// behind in scripts.go): the claim it is for, the claim that left just
// ahead of it, for a departure from the head of the queue the server's
// clock then (zero otherwise), and whether the run recorded that time in
// the claim it is for.
func parseBehindMessage(p string) (id string, e claimEvent, head time.Time, recorded, ok bool) {
	f := strings.SplitN(p, " ", 5)
	if len(f) != 5 || (f[0] != "d" && f[0] != "h" && f[0] != "H") {
		return "", e, head, false, false
	}
	tok, err1 := strconv.ParseUint(f[1], 10, 64)
	ms, err2 := strconv.ParseInt(f[2], 10, 64)
	n, err3 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || err3 != nil || n < 0 || n > len(f[4]) {
		return "", e, head, false, false
	}
	if f[0] != "d" {
		head = time.UnixMilli(ms)
	}
	return f[4][:n], claimEvent{key: f[4][n:], token: tok}, head, f[0] == "H", true
}

// parseClaimMessage reads a message of a claim's channel (see scripts.go):
// the claim, what happened to it (admitted or departed), and for a
// departure from the head of its queue the server's clock then and
// whether the run recorded that time in the claim behind (zero and false
// otherwise).
func parseClaimMessage(p string) (e claimEvent, what byte, head time.Time, recorded, ok bool) {
	w, rest, _ := strings.Cut(p, " ")
	tok, rest, ok := strings.Cut(rest, " ")
	if !ok || len(w) != 1 {
		return e, 0, head, false, false
	}
	token, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return e, 0, head, false, false
	}
	what = w[0]
	if what == 'h' || what == 'H' {
		ms, key, found := strings.Cut(rest, " ")
		if head, err = parseMillis(ms); !found || err != nil {
			return e, 0, time.Time{}, false, false
		}
		recorded = what == 'H'
		what, rest = departed, key
	}
	return claimEvent{key: rest, token: token}, what, head, recorded, true
}
