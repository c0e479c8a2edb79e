package etcd

import (
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Range watches: every event of a directory, in revision order.
//
// A keyWatch with ranged set watches every key under its key (a queue
// directory) for puts and deletes alike, and does not end at its first
// event: it streams them to its target, for as long as it is not stopped.
// It is created on the mux's one stream like the single-key watches, so a
// Backend's observations (observe.go) cost one watch each on that stream
// and open no stream of their own.
//
// Its resume revision, from, is the revision after the last one delivered.
// It is always created at from itself, never at etcd's current revision:
// its target needs every event, and there is no read that could stand in
// for the events of a gap. (etcd serves a watch that starts in the past
// from its unsynced set, up to 100ms late; an observer, unlike a waiter,
// stalls no handoff meanwhile.) After a stream break it is created again
// from from, so nothing is skipped and nothing delivered twice. etcd sends
// one revision's events in one response (it splits catch-up batches only
// between revisions), so a target sees every revision whole.
//
// If from has been compacted away, etcd drops the watch; the mux then ends
// it and tells its target compacted(), after every event delivered before.
// The target reads the directory again, once, and starts a new range
// watch after that read's revision: the changes inside the compacted gap
// may be missed, but none is seen out of order.

// A range watch's target is told from the receive goroutine, one call at a
// time and in order (see watchNews): events all at or above the revision
// the watch was at; after compacted or err the watch is done.

// newRangeWatch returns a range watch of the keys under dir from revision
// from on, reporting to t. Start it with mux.start, end it with mux.stop.
func newRangeWatch(dir string, from int64, t watchTarget) *keyWatch {
	return &keyWatch{key: dir, from: from, ranged: true, target: t}
}

// rangeEventsLocked passes on a response's events to a range watch's
// target, those below its resume revision excepted (etcd sends none; the
// check keeps a replay from being applied twice), and moves the resume
// revision past them. Called with m.mu held.
func (m *mux) rangeEventsLocked(w *keyWatch, evs []*mvccpb.Event) []notice {
	i := 0
	for i < len(evs) && evs[i].Kv.ModRevision < w.from {
		i++
	}
	evs = evs[i:]
	if len(evs) == 0 {
		return nil
	}
	w.from = evs[len(evs)-1].Kv.ModRevision + 1
	return []notice{func() { w.target.notify(watchNews{evs: evs}) }}
}

// Watches of older claims: the first delete of one of a counted claim's
// holders.
//
// A counted claim's first waiter has exactly n older claims ahead of it,
// all holders, and is admitted once any of them goes. Rather than one
// watch per holder (n creates and n cancels per admission), it watches
// its queue directory for deletes (NOPUT), like a single-key watch for
// its delete: created at etcd's current revision, ended by the first
// delete at or above from. A read settles the gap before the create and
// a compaction, as for a key (watchcheck.go): it lists the keys of the
// claims older than the waiter (no claim older than it can join, so
// their number only falls), and fewer than n means one went. A delete of
// a newer claim (a waiter behind giving up) ends the watch as well; the
// waiter's next read then finds all n holders still there and watches
// again, which is rare and costs one round of the wait.

// newOlderWatch returns a watch of dir for the first delete, at revision
// from or later, of one of the need claims created before revision older.
func newOlderWatch(dir string, older int64, need int, from int64, t watchTarget) *keyWatch {
	return &keyWatch{key: dir, older: older, need: need, from: from, now: true, target: t}
}

// olderOp reads the keys of the claims in dir created before revision
// older. (etcd counts before it filters by create revision: a count-only
// read would count every claim, hence the keys.)
func olderOp(dir string, older int64, opts ...clientv3.OpOption) clientv3.Op {
	return clientv3.OpGet(dir, append(opts, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(older-1))...)
}
