package memory

import (
	"bytes"
	"context"
	"fmt"
	"iter"

	"github.com/ash-lock/ashlock/backend"
)

// Inspect reports key's holders, oldest first (label, token, permit, kind,
// value, acquisition time, stamp), with the oldest one's also in the
// top-level fields, the permit count its claims agree on, and the claims
// queued behind, in queue order: every claim in the queue that does not
// hold all its keys yet. A multi-key claim appears at each of its keys.
// Non-fair requests waiting outside the queue are not listed. A free key
// gives Held == false and a nil error. Values are copies. Inspect does not
// block; it fails with ctx's error if ctx has already ended, and with
// backend.ErrClosed after Close.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	if ctx.Err() != nil {
		return backend.LockInfo{}, fmt.Errorf("memory: inspect %q: %w", key, backend.ContextError(ctx))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.LockInfo{}, errClosed("inspect")
	}
	return b.stateLocked(key, true), nil
}

// stateLocked is what Inspect reports of key (see backend.Describe), with
// the waiters only if waiters (observers are not told about them). Values
// are copied: the store replaces a claim's value, and a copy keeps callers
// away from its memory.
func (b *Backend) stateLocked(key string, waiters bool) backend.LockInfo {
	// Most queues are short: their claims are listed without allocating.
	var buf [8]backend.Queued
	q := buf[:0]
	var e *entry
	if k := b.keys[key]; k != nil {
		e = k.queue.head
	}
	// The claims that can hold the key are a prefix of the queue (its free
	// entries); without waiters there is nothing to look at past it.
	for ; e != nil && (waiters || e.free); e = e.next {
		c := e.c
		q = append(q, backend.Queued{
			Kind:       backend.Kind{Shared: c.shared, Permits: int(c.permits)},
			Token:      c.token,
			Admitted:   c.state == stateHolding,
			Permit:     int(c.permit), // read only for a holder (Admitted)
			Owner:      c.owner,
			Value:      c.value(),
			AcquiredAt: c.acquiredAt,
			Stamp:      c.stamp,
		})
	}
	info := backend.Describe(key, q, waiters)
	for i := range info.Holders {
		info.Holders[i].Value = bytes.Clone(info.Holders[i].Value)
	}
	return info
}

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
	byKey map[string]*feed
	dirty []*keyState // keys whose holders may have changed since the last flush
}

// feed is the states of one observed key: a list that grows at its tail,
// which each observation of the key walks at its own pace. Observers are
// never blocked on: a slow one only keeps the states after its own alive.
type feed struct {
	observers int
	tail      *change // the last state queued
}

// change is one state of a feed.
type change struct {
	info  backend.LockInfo
	next  *change       // set, under the Backend's mutex, before ready is closed
	ready chan struct{} // closed when next is set
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

// flushObserversLocked queues the new state of every dirty key that has
// observers, if its holders differ from the last state queued.
func (b *Backend) flushObserversLocked() {
	o := b.obs
	for _, k := range o.dirty {
		if f := o.byKey[k.name]; f != nil {
			if info := b.stateLocked(k.name, false); !backend.SameHolders(f.tail.info, info) {
				next := &change{info: info, ready: make(chan struct{})}
				f.tail.next = next
				close(f.tail.ready)
				f.tail = next
			}
		}
	}
	clear(o.dirty)
	o.dirty = o.dirty[:0]
}

// Observe implements backend.Observer: it yields key's holders (as
// Inspect reports them, without the waiters) now, then after every change
// of them, in the order the store made the changes, each state once. It
// waits on a channel, never polls. The observations of a key share one
// list of its states, which each walks at its own pace, so a slow consumer
// delays no one, and one that never reads keeps every later state. It ends
// when ctx ends, and yields an error wrapping backend.ErrClosed once if the
// Backend closes.
func (b *Backend) Observe(ctx context.Context, key string) iter.Seq2[backend.LockInfo, error] {
	return func(yield func(backend.LockInfo, error) bool) {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			yield(backend.LockInfo{}, errClosed("observe"))
			return
		}
		if b.obs == nil {
			b.obs = &observers{byKey: make(map[string]*feed)}
		}
		first := b.stateLocked(key, false)
		f := b.obs.byKey[key]
		if f == nil {
			f = &feed{tail: &change{info: first, ready: make(chan struct{})}}
			b.obs.byKey[key] = f
		}
		f.observers++
		at := f.tail
		b.mu.Unlock()
		defer b.unobserve(key, f)

		for info := first; yield(info, nil); info = at.info {
			select {
			case <-at.ready:
			case <-ctx.Done():
				return
			case <-b.done:
				// The states queued before the close are still owed, in
				// order, then the error.
				select {
				case <-at.ready:
				default:
					yield(backend.LockInfo{}, errClosed("observe"))
					return
				}
			}
			at = at.next
		}
	}
}

// unobserve forgets one observation of f, the feed of key.
func (b *Backend) unobserve(key string, f *feed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f.observers--; f.observers == 0 {
		delete(b.obs.byKey, key)
	}
}
