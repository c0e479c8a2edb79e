package memory

import (
	"context"
	"iter"
	"slices"

	"github.com/ash-lock/ashlock/backend"
)

var _ backend.Observer = (*Backend)(nil)

// Observation of keys (backend.Observer).
//
// The store marks a key dirty whenever its holders may have changed (a
// claim promoted or removed, a value set) and flushes the marks at the end
// of the operation that made them, still under the Backend's mutex: so an
// operation that changes several holders at once (a writer's release
// admitting a run of readers, a lease's end) is seen as one change, and
// the states queued for observers are in the store's order. Nothing is
// done while nobody observes: the hooks cost one nil test.

// observers is the Backend's record of its observations, made on the
// first Observe. Guarded by the Backend's mutex.
type observers struct {
	byKey map[string][]*observation
	dirty []*keyState // keys whose holders may have changed since the last flush
}

// observation is one running Observe.
type observation struct {
	key     string
	last    backend.LockInfo   // the last state queued; guarded by Backend.mu
	pending []backend.LockInfo // queued, not yet yielded; guarded by Backend.mu
	signal  chan struct{}      // cap 1: pending has something
}

// markLocked notes that the holders of c's keys may have changed.
func (o *observers) markLocked(c *claim) {
	for i := range c.nKeys() {
		o.dirty = append(o.dirty, c.entryAt(i).key)
	}
}

// flushLocked ends an operation that may have changed holders: it queues
// the new state of every dirty key for its observers, if anyone observes.
// It is small enough to be inlined, so it costs one nil test otherwise.
func (b *Backend) flushLocked() {
	if b.obs != nil {
		b.flushObserversLocked()
	}
}

// flushObserversLocked queues the new state of every dirty key for its
// observers, those whose last state differs. Observers are never blocked
// on: their queue is unbounded, and the signal channel has room for one
// wake-up.
func (b *Backend) flushObserversLocked() {
	o := b.obs
	for _, k := range o.dirty {
		watchers := o.byKey[k.name]
		if len(watchers) == 0 {
			continue
		}
		info := stateOf(k, false)
		for _, w := range watchers {
			if backend.SameHolders(w.last, info) {
				continue
			}
			w.last = info
			w.pending = append(w.pending, info)
			select {
			case w.signal <- struct{}{}:
			default:
			}
		}
	}
	clear(o.dirty)
	o.dirty = o.dirty[:0]
}

// Observe implements backend.Observer: it yields key's holders (as
// Inspect reports them, without the waiters) now, then after every change
// of them, in the order the store made the changes, each state once. It
// waits on a channel, never polls. Each observation keeps the states not
// yet yielded in a queue of its own, so a slow consumer delays no one,
// and one that never reads grows its queue. It ends when ctx ends, and
// yields an error wrapping backend.ErrClosed once if the Backend closes.
func (b *Backend) Observe(ctx context.Context, key string) iter.Seq2[backend.LockInfo, error] {
	return func(yield func(backend.LockInfo, error) bool) {
		w := &observation{key: key, signal: make(chan struct{}, 1)}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			yield(backend.LockInfo{}, errClosed("observe"))
			return
		}
		if b.obs == nil {
			b.obs = &observers{byKey: make(map[string][]*observation)}
		}
		w.last = backend.LockInfo{Key: key}
		if k := b.keys[key]; k != nil {
			w.last = stateOf(k, false)
		}
		first := w.last
		b.obs.byKey[key] = append(b.obs.byKey[key], w)
		b.mu.Unlock()
		defer b.unobserve(w)

		if !yield(first, nil) {
			return
		}
		for {
			closed := false
			select {
			case <-w.signal:
			case <-ctx.Done():
				return
			case <-b.done:
				closed = true // states queued before the close are still owed, in order
			}
			for _, info := range b.takePending(w) {
				if !yield(info, nil) {
					return
				}
			}
			if closed {
				yield(backend.LockInfo{}, errClosed("observe"))
				return
			}
		}
	}
}

// takePending returns w's queued states and empties its queue.
func (b *Backend) takePending(w *observation) []backend.LockInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := w.pending
	w.pending = nil
	return p
}

// unobserve forgets w.
func (b *Backend) unobserve(w *observation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	list := slices.DeleteFunc(b.obs.byKey[w.key], func(x *observation) bool { return x == w })
	if len(list) == 0 {
		delete(b.obs.byKey, w.key)
	} else {
		b.obs.byKey[w.key] = list
	}
}
