package redis

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/ash-lock/ashlock/backend"
)

// Observation of a key's holders (backend.Observer).
//
// An Observe subscribes to the key's channel and, once the server has
// confirmed it, reads the key's queue once (observeScript), which ends by
// publishing a marker of its own (a fresh nonce) on that channel. From
// then on it applies the messages of the channel to its own copy of the
// queue, one script run at a time, in the order the subscriber received
// them (the order the server ran the scripts): each carries what changed,
// the claim's record (owner and value included). The messages up to the
// read's marker were published by runs before the read, which saw their
// changes: they are dropped. No script writes anything for its observers,
// so a change costs the same whether or not anyone observes the key.
// After each message it computes the holders with
// backend.Describe, Inspect's rule, and yields them if they differ from
// the last state yielded: every change is reported in order, however
// fast the changes come and however slow the consumer is.
//
// When the subscriber's connection breaks, or what it receives cannot be
// trusted to be whole (see listen), the messages published until its
// channels are subscribed again on a new connection may be lost: each
// observer drops what arrives meanwhile and reads its queue again once
// they are. Changes inside that gap, from the last ping the server
// answered before it to that read, may be missed, never reordered; the
// hook set by WithSubscriberGapHook is told of each.
//
// A holder whose lease ends is reaped by whoever learns of it first:
// the Backend, told by the lease's keyspace notification, or the
// observer, at a timer set to the lease's end as the server last
// reported it (a read then reaps it). The reap is a change like any
// other, so the holder's departure arrives as a message.

// view is one running Observe: key's queue as of the messages applied.
type view struct {
	b      *Backend
	key    string
	o      *observer
	claims []queued                      // in token order
	await  string                        // the last read's nonce, until its marker arrives
	ends   map[backend.LeaseID]time.Time // when leases end, as last reported
	held   []backend.LeaseID             // the leases of the holders yielded last
	last   backend.LockInfo
	yield  func(backend.LockInfo, error) bool
}

// errStopped: the consumer stopped the iteration.
var errStopped = errors.New("redis observe: stopped")

// Observe implements backend.Observer: it yields the state of key (as
// Inspect reports it, without waiters) first, then a new state after
// every change of its holders (a claim coming to hold or leaving, a
// holder's value set), in the order Redis made them; see above for the
// subscriber's reconnections. The inbox of messages not yet applied is
// unbounded: a consumer slower than the key's changes costs memory, not
// missed states. It never polls. The sequence ends when ctx ends; when
// the Backend is closed it yields an error wrapping ErrClosed once and
// ends. While Redis cannot be reached it retries every second.
func (b *Backend) Observe(ctx context.Context, key string) iter.Seq2[backend.LockInfo, error] {
	return func(yield func(backend.LockInfo, error) bool) {
		if err := b.closedErr("observe"); err != nil {
			yield(backend.LockInfo{}, err)
			return
		}
		if err := backend.CheckKey(key); err != nil {
			yield(backend.LockInfo{}, err)
			return
		}
		o := b.reg.addObserver(key)
		defer b.reg.dropObserver(o)
		w := b.reg.watch([]string{key}, true)
		defer b.reg.unwatch(w)
		v := &view{b: b, key: key, o: o, yield: yield, ends: map[backend.LeaseID]time.Time{}}
		err := v.run(ctx, w)
		switch {
		case errors.Is(err, errStopped) || ctx.Err() != nil:
		case b.closedErr("observe") != nil:
			yield(backend.LockInfo{}, b.closedErr("observe"))
		case err != nil:
			yield(backend.LockInfo{}, err)
		}
	}
}

// run subscribes, reads the queue, then applies the inbox until ctx
// ends, the Backend closes or the consumer stops.
func (v *view) run(ctx context.Context, w *watcher) error {
	if err := v.subscribe(ctx, w); err != nil {
		return err
	}
	if err := v.resync(ctx); err != nil {
		return err
	}
	if err := v.emit(true); err != nil {
		return err
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var ended <-chan time.Time
		if end, ok := v.nextEnd(); ok {
			timer.Reset(time.Until(end) + time.Millisecond)
			ended = timer.C
		}
		select {
		case <-v.o.signal:
		case <-ended:
			if err := v.refreshEnds(ctx); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		case <-v.b.done:
			return nil
		}
		timer.Stop()
		for _, it := range v.b.reg.take(v.o) {
			var err error
			if it.resync {
				// The gap lasts until this read; it is reported before
				// the state after it is yielded.
				if err = v.resync(ctx); err == nil {
					if v.b.onGap != nil {
						v.b.onGap(it.from, time.Now())
					}
					err = v.emit(false)
				}
			} else {
				err = v.apply(it.msg)
			}
			if err != nil {
				return err
			}
		}
	}
}

// subscribe makes w hold the key's channel and waits until the server
// has confirmed it: only a read that follows misses no later change.
func (v *view) subscribe(ctx context.Context, w *watcher) error {
	for !v.b.reg.arm(w, nil, nil) {
		v.b.reg.disarm(w)
	}
	for !v.b.reg.confirmed(w) {
		select {
		case <-w.wake:
		case <-ctx.Done():
			return fmt.Errorf("redis observe: %w", ctx.Err())
		case <-v.b.done:
			return v.b.closedErr("observe")
		}
	}
	return nil
}

// apply applies one script run's changes to the copy and yields the new
// state if it differs from the last one yielded.
func (v *view) apply(m keyMessage) error {
	if m.marker != "" {
		if m.marker == v.await {
			v.await = ""
		}
		return nil
	}
	if v.await != "" {
		return nil // the last read saw it
	}
	now := time.Now()
	for _, ch := range m.changes {
		i, found := slices.BinarySearchFunc(v.claims, ch.c.token, func(c queued, t uint64) int {
			switch {
			case c.token < t:
				return -1
			case c.token > t:
				return 1
			}
			return 0
		})
		switch ch.kind {
		case 'j':
			if found {
				v.claims[i] = ch.c
			} else {
				v.claims = slices.Insert(v.claims, i, ch.c)
			}
		case 'r':
			if found {
				v.claims[i] = ch.c
			}
		case 'v':
			if found {
				v.claims[i].value = ch.c.value
			}
		case 'd':
			if found {
				v.claims = slices.Delete(v.claims, i, i+1)
			}
		}
		if ch.pttl >= 0 {
			v.ends[ch.c.lease] = now.Add(ch.pttl)
		}
	}
	return v.emit(false)
}

// resync replaces the copy with one read of the queue, retried every
// second while Redis cannot be reached, and drops the messages until the
// read's marker. A marker that never comes (the subscription broke after
// the read) is followed by a resync of its own.
func (v *view) resync(ctx context.Context) error {
	for {
		nonce := uuid.NewString()
		q, err := v.b.observeRead(ctx, v.key, nonce)
		if err == nil {
			v.claims, v.await = q, nonce
			clear(v.ends)
			v.noteEnds(q)
			return nil
		}
		if err := v.pause(ctx); err != nil {
			return err
		}
	}
}

// refreshEnds reads the queue when a holder's lease should have ended:
// the read reaps it if it has (its departure then arrives as a message)
// and tells when the others end. The copy is not replaced: that would
// merge the changes made since the messages applied so far.
func (v *view) refreshEnds(ctx context.Context) error {
	for {
		q, err := v.b.observeRead(ctx, v.key, "")
		if err == nil {
			v.noteEnds(q)
			return nil
		}
		if err := v.pause(ctx); err != nil {
			return err
		}
	}
}

// noteEnds records when the leases of q's claims end, as the read saw.
func (v *view) noteEnds(q []queued) {
	now := time.Now()
	for _, c := range q {
		if c.pttl >= 0 {
			v.ends[c.lease] = now.Add(c.pttl)
		} else {
			delete(v.ends, c.lease)
		}
	}
}

// nextEnd returns the earliest known end of a holder's lease.
func (v *view) nextEnd() (time.Time, bool) {
	var end time.Time
	found := false
	for _, l := range v.held {
		if e, ok := v.ends[l]; ok && (!found || e.Before(end)) {
			end, found = e, true
		}
	}
	return end, found
}

// pause waits a second before a read is tried again, or returns why not.
func (v *view) pause(ctx context.Context) error {
	if err := v.b.closedErr("observe"); err != nil {
		return err
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("redis observe: %w", ctx.Err())
	case <-v.b.done:
		return v.b.closedErr("observe")
	}
}

// emit yields the copy's state if always is set or its holders differ
// from the last state yielded, and records the holders' leases.
func (v *view) emit(always bool) error {
	info := describe(v.key, v.claims, false)
	var leases []backend.LeaseID
	for _, h := range info.Holders {
		for _, c := range v.claims {
			if c.token == h.Token && !slices.Contains(leases, c.lease) {
				leases = append(leases, c.lease)
			}
		}
	}
	v.held = leases
	v.b.reg.setLeases(v.o, leases)
	if !always && backend.SameHolders(v.last, info) {
		return nil
	}
	v.last = info
	if !v.yield(info, nil) {
		return errStopped
	}
	return nil
}

// observeRead runs observeScript: key's queue, after reaping the claims
// of ended leases. Unless nonce is "", the read's marker follows on the
// key's channel.
func (b *Backend) observeRead(ctx context.Context, key, nonce string) ([]queued, error) {
	v, err := observeScript.Run(ctx, b.c, []string{b.lay.token()}, b.lay.tag, key, nonce).Slice()
	if err != nil {
		return nil, b.fail(ctx, "observe", err)
	}
	q, err := parseQueue(v)
	if err != nil {
		return nil, fmt.Errorf("%w: redis observe %q: %w", backend.ErrUnavailable, key, err)
	}
	return q, nil
}
