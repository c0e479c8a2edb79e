package redis

import (
	"slices"
	"time"
)

// The Backend's one subscriber connection carries only the channels its
// watchers need: the channel of each claim an Acquire waits for, and the
// channel of each key an Observe watches. A departure or admission is
// published to the claim's channel, so it reaches only the Backends that
// wait for that claim, whatever the number of Backends on the prefix.
//
// A waiter learns which claim to wait for from a read, and subscribes
// after it: a departure between the two would go unheard. So a new
// channel counts as confirmed only once the server has answered a PING
// sent after its SUBSCRIBE on the same connection, and a waiter whose
// last read did not begin after that answer is woken once it has come,
// to check once more (now heard if the claim departs). Pongs arrive in the order of the pings, and
// a PING on a connection made after a reconnect follows the
// resubscription of every channel, so a pong confirms every channel
// subscribed before its ping, whichever connection that was on.
//
// A pong also bounds what may have been missed: every message published
// before its ping was sent has been received by then. So when the
// subscriber's stream breaks, what it may have lost was published after
// the ping last answered was sent (registry.verified); the listener pings
// every pingEvery to keep that recent.

// subscriber sends subscription commands on the subscriber connection.
type subscriber interface {
	subscribe(channels []string, ping uint64)
	unsubscribe(channels []string)
	ping(seq uint64)
}

// sentPing is a ping not answered yet, and when it was sent.
type sentPing struct {
	seq uint64
	at  time.Time
}

// chanSub is one subscribed channel.
type chanSub struct {
	refs int    // watchers holding it
	pong uint64 // the ping whose answer confirms it
}

// channels returns what w listens to while waiting for want: the channels
// of its keys for an Observe, none for a waiter told on the Backend's own
// channel (see direct), else those of the claims in want.
func (r *registry) channels(w *watcher, want []wanted) []string {
	var out []string
	if w.id != "" {
		return nil
	}
	if w.any {
		for _, k := range w.keys {
			out = append(out, r.lay.keyChannel(k))
		}
		return out
	}
	for _, e := range want {
		if ch := r.lay.claimChannel(e.token); !slices.Contains(out, ch) {
			out = append(out, ch)
		}
	}
	return out
}

// retain makes w hold exactly chs, returning the channels to subscribe
// (with the ping to send after them) and to unsubscribe. Guarded by
// registry.mu, under registry.subMu.
func (r *registry) retain(w *watcher, chs []string) (add, drop []string, ping uint64) {
	for _, ch := range chs {
		if slices.Contains(w.chans, ch) {
			continue
		}
		s := r.chans[ch]
		if s == nil {
			s = &chanSub{}
			r.chans[ch] = s
			add = append(add, ch)
		}
		s.refs++
	}
	for _, ch := range w.chans {
		if slices.Contains(chs, ch) {
			continue
		}
		if s := r.chans[ch]; s != nil {
			if s.refs--; s.refs == 0 {
				delete(r.chans, ch)
				drop = append(drop, ch)
			}
		}
	}
	w.chans = chs
	if len(add) > 0 {
		ping = r.nextPing()
		for _, ch := range add {
			r.chans[ch].pong = ping
		}
	}
	return add, drop, ping
}

// nextPing numbers a ping about to be sent. Guarded by registry.mu, under
// registry.subMu, so that pings leave in the order of their numbers.
func (r *registry) nextPing() uint64 {
	r.pinged++
	r.sent = append(r.sent, sentPing{r.pinged, time.Now()})
	return r.pinged
}

// confirmedBy reports whether every channel w holds was confirmed by the
// answer to ping seq or an earlier one. Guarded by registry.mu.
func (r *registry) confirmedBy(w *watcher, seq uint64) bool {
	for _, ch := range w.chans {
		if s := r.chans[ch]; s != nil && s.pong > seq {
			return false
		}
	}
	return true
}

// armConfirm makes sure w reads again once the server has confirmed its
// channels, unless they were confirmed before its last read began: only
// then did that read follow the subscriptions. A confirmation that came
// during the read wakes it at once. Guarded by registry.mu.
func (r *registry) armConfirm(w *watcher) {
	switch {
	case r.confirmedBy(w, w.readFrom):
	case r.confirmedBy(w, r.ponged):
		w.wakeFor(wokeConfirmed)
	default:
		r.unconfirmed[w] = struct{}{}
	}
}

// send sends what retain decided. Called under registry.subMu, so that
// commands leave in the order of the decisions.
func (r *registry) send(add, drop []string, ping uint64) {
	if r.sub == nil {
		return
	}
	if len(add) > 0 {
		r.sub.subscribe(add, ping)
	}
	if len(drop) > 0 {
		r.sub.unsubscribe(drop)
	}
}

// pong records the server's answer to ping seq and wakes the armed
// watchers it confirms, which then check once more what they wait for.
// It reports false when no ping seq was sent: the answer cannot be one.
func (r *registry) pong(seq uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq == 0 || seq > r.pinged {
		return false
	}
	if seq <= r.ponged {
		return true
	}
	r.ponged = seq
	i := 0
	for ; i < len(r.sent) && r.sent[i].seq <= seq; i++ {
		r.verified = r.sent[i].at
	}
	r.sent = slices.Delete(r.sent, 0, i)
	for w := range r.unconfirmed {
		if r.confirmedBy(w, seq) {
			delete(r.unconfirmed, w)
			w.wakeFor(wokeConfirmed)
		}
	}
	return true
}

// healthPing sends a ping with nothing to confirm: its answer shows the
// connection alive and moves registry.verified on.
func (r *registry) healthPing() {
	r.subMu.Lock()
	defer r.subMu.Unlock()
	r.mu.Lock()
	seq := r.nextPing()
	r.mu.Unlock()
	if r.sub != nil {
		r.sub.ping(seq)
	}
}

// reconfirm pings again for channels still unconfirmed: after a
// reconnect the pings sent on the old connection get no answer.
func (r *registry) reconfirm() {
	r.subMu.Lock()
	defer r.subMu.Unlock()
	r.mu.Lock()
	var seq uint64
	if r.pinged > r.ponged {
		seq = r.nextPing()
		for _, s := range r.chans {
			if s.pong > r.ponged {
				s.pong = seq
			}
		}
	}
	r.mu.Unlock()
	if seq > 0 && r.sub != nil {
		r.sub.ping(seq)
	}
}

// subscribed lists every channel held, for a new subscriber connection.
func (r *registry) subscribed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.chans))
	for ch := range r.chans {
		out = append(out, ch)
	}
	return out
}
