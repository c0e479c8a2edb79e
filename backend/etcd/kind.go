package etcd

import (
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// A claim's kind (backend.Kind) is part of its name, and only there (its
// record does not repeat it), so that the reads of a queue that decide who
// holds the key stay keys-only, whatever values the claims publish (up to
// backend.MaxValueLen each):
//
//	<lease hex>[-<slot>]          exclusive
//	s<lease hex>[-<slot>]         shared
//	<lease hex>[-<slot>].<n>      counted, n permits
//
// Exclusive and counted names start with a hex digit, shared ones with
// 's', so under a queue directory the key range [dir+"0", dir+"g") holds
// exactly the claims that are not shared: a shared claim waits for the
// newest older claim of that range alone, with a single-key read.

var exclusive = backend.Kind{Permits: 1}

// kindName decorates the plain claim name base with the kind k.
func kindName(k backend.Kind, base string) string {
	switch {
	case k.Shared:
		return "s" + base
	case k.Counted():
		return base + "." + strconv.Itoa(k.Permits)
	}
	return base
}

// kindOfName reads the kind back from a claim name (the last path element
// of a claim key). A name this package did not make reads as exclusive.
func kindOfName(name string) backend.Kind {
	name = name[strings.LastIndexByte(name, '/')+1:]
	if strings.HasPrefix(name, "s") {
		return backend.Kind{Shared: true, Permits: 1}
	}
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		if n, err := strconv.Atoi(name[i+1:]); err == nil && n > 1 {
			return backend.Kind{Permits: n}
		}
	}
	return exclusive
}

// The kinds as a table. What a claim of kind k looks at in a queue
// directory dir is the key range of the claims that can block it: every
// claim for an exclusive or counted claim, only the non-shared ones for a
// shared claim, so that a reader never waits for a reader. The three
// functions below are the reads and compares every path builds from it.

// blockers returns the key range [start, end) of dir holding the claims
// that block a claim of kind k.
func blockers(k backend.Kind, dir string) (start, end string) {
	if k.Shared {
		return dir + "0", dir + "g"
	}
	return dir, clientv3.GetPrefixRangeEnd(dir)
}

// aheadOf reads (keys only) the newest claim of dir that blocks a claim of
// kind k and was created before revision token, or with token 0 the
// newest of all: the claim that a claim of kind k waits for.
func aheadOf(k backend.Kind, dir string, token int64) clientv3.Op {
	start, end := blockers(k, dir)
	return clientv3.OpGet(start, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(1),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithMaxCreateRev(max(token-1, 0))) // 0: no bound
}

// freeOf holds while no claim of dir blocks a claim of kind k. (A compare
// over an empty range compares against a zero KeyValue, whose create
// revision is 0; every claim's is above.)
func freeOf(k backend.Kind, dir string) clientv3.Cmp {
	start, end := blockers(k, dir)
	return clientv3.Compare(clientv3.CreateRevision(start), "=", 0).WithRange(end)
}

// firstOf holds while every claim of dir that would block a claim of kind k
// was created at revision token or later, and the range is not empty: the
// claim created at token is admitted at dir. The range of an exclusive or
// counted claim holds the claim itself, so it is never empty; a shared
// claim's can be, which a compare cannot test (see freeOf), so a shared
// waiter tests that case apart (see waitAt).
func firstOf(k backend.Kind, dir string, token int64) clientv3.Cmp {
	start, end := blockers(k, dir)
	return clientv3.Compare(clientv3.CreateRevision(start), ">", token-1).WithRange(end)
}

// agrees reports whether a claim of kind k may queue behind the claim
// named pred: they agree on the permit count (exclusive and shared claims
// count as one).
//
// A claim checks the count against the claim just ahead of it only, when
// it enqueues. A claim that disagrees removes itself, but while it is
// queued it can mislead a claim enqueued behind it: a request that agrees
// with the queue may then fail with ErrPermitMismatch, or one that does
// not may queue among claims of another count. The second case keeps
// exclusion, because every kind treats a claim of another kind
// conservatively: an exclusive claim waits for every older claim, a
// shared one for every older non-shared claim, and a counted one for the
// delete of an older claim while any older claim is of another kind
// (countedNext). The window is one round trip of the misleading request.
func agrees(k backend.Kind, pred string) bool { return kindOfName(pred).Permits == k.Permits }
