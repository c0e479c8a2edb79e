package redis

import (
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// observer is the inbox of one Observe: the messages of its key's channel
// in the order the subscriber received them, and the gaps of the
// subscription between them. Guarded by registry.mu.
type observer struct {
	key    string
	signal chan struct{} // capacity 1: the inbox has something
	inbox  []inboxItem
	inGap  bool              // the connection broke: drop messages until resubscribed
	leases []backend.LeaseID // its copy's holders' leases, reaped at once when they end
}

// inboxItem is a message, or (resync) the end of a gap of the
// subscription: whatever was published since from may be lost.
type inboxItem struct {
	msg    keyMessage
	resync bool
	from   time.Time
}

// addObserver registers an inbox for the messages of key's channel.
func (r *registry) addObserver(key string) *observer {
	o := &observer{key: key, signal: make(chan struct{}, 1)}
	r.mu.Lock()
	defer r.mu.Unlock()
	o.inGap = r.inGap
	m := r.observers[key]
	if m == nil {
		m = map[*observer]struct{}{}
		r.observers[key] = m
	}
	m[o] = struct{}{}
	return o
}

func (r *registry) dropObserver(o *observer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.observers[o.key]; m != nil {
		delete(m, o)
		if len(m) == 0 {
			delete(r.observers, o.key)
		}
	}
}

// take returns what o's inbox holds, emptying it.
func (r *registry) take(o *observer) []inboxItem {
	r.mu.Lock()
	defer r.mu.Unlock()
	items := o.inbox
	o.inbox = nil
	return items
}

// setLeases records the leases of o's holders.
func (r *registry) setLeases(o *observer, leases []backend.LeaseID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o.leases = leases
}

// keyMessage hands a message of key's channel to its observers.
func (r *registry) keyMessage(key string, m keyMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for o := range r.observers[key] {
		if !o.inGap {
			o.push(inboxItem{msg: m})
		}
	}
}

// gapStarted marks the subscription broken: what arrives before it is
// restored may follow lost messages, and the read each observer makes
// then accounts for it.
func (r *registry) gapStarted() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.inGap {
		r.gapFrom = r.verified
	}
	r.inGap = true
	r.gaps.Add(1)
	for _, m := range r.observers {
		for o := range m {
			o.inGap = true
		}
	}
}

// resyncKey tells key's observers to read it again.
func (r *registry) resyncKey(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for o := range r.observers[key] {
		o.push(inboxItem{resync: true, from: r.verified})
	}
}

// gapEnded tells every observer to read its queue again: messages may
// have been lost while the subscription was down, or since the last ping
// answered if the listener saw no break (go-redis replaced the connection
// between two reads). Guarded by registry.mu.
func (r *registry) gapEnded() {
	from := r.verified
	if r.inGap {
		from = r.gapFrom
	}
	r.inGap = false
	r.gaps.Add(1)
	for _, m := range r.observers {
		for o := range m {
			o.inGap = false
			o.push(inboxItem{resync: true, from: from})
		}
	}
}

// observed reports whether an observer's holder has lease id. Guarded by
// registry.mu.
func (r *registry) observedLease(id backend.LeaseID) bool {
	for _, m := range r.observers {
		for o := range m {
			for _, l := range o.leases {
				if l == id {
					return true
				}
			}
		}
	}
	return false
}

func (o *observer) push(it inboxItem) {
	o.inbox = append(o.inbox, it)
	o.wake()
}

func (o *observer) wake() {
	select {
	case o.signal <- struct{}{}:
	default:
	}
}

// confirmed reports whether the server has confirmed every channel w
// holds.
func (r *registry) confirmed(w *watcher) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.confirmedBy(w, r.ponged)
}
