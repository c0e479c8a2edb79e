package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ash-lock/ashlock/backend"
)

// Options of the reads of a queue directory. Only the claims' keys and
// revisions are used, never their values, and an OpOption is a function
// that keeps no state, so one slice of each serves every read (callers that
// add an option append to a full-capacity slice, which copies).
var (
	newestKey = append(clientv3.WithLastCreate(), clientv3.WithKeysOnly())
	oldestKey = append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())
)

// queueRead is what every enqueue of one lock key sends besides its own
// claim: the key's queue directory and the read of the newest claim in it.
// Building the read costs clientv3 about nine allocations (OpGet applies
// its options three times: twice to check them, once to use them), so it
// is built once per key and kept with the key's free names
// (see namePool.borrow); with the claim record's one allocation fewer, that
// was worth about 1 % of an uncontended cycle (BENCHMARKS.md, table 1).
// An Op is only read when a Txn is made from it, so one serves any number
// of concurrent enqueues.
type queueRead struct {
	dir    string
	newest clientv3.Op
}

func newQueueRead(dir string) *queueRead {
	return &queueRead{dir: dir, newest: clientv3.OpGet(dir, newestKey...)}
}

// enqueue is the fair path. One Txn: if the claim does not exist yet, read
// the newest claim of the queue (the one just ahead of us), then create
// ours. Uncontended, that is the whole acquisition.
//
// The claim can only exist already if a write under our name was applied by
// etcd after its sender stopped waiting for it: this Txn, resent after a
// lost reply, or a stray from an earlier borrower of the name (see stray).
// That is rare enough to cost a second round trip (see adopt) rather than
// an Else branch that every enqueue would send and etcd decode.
func (a *acquisition) enqueue(ctx context.Context) error {
	now := time.Now()
	notYet := clientv3.Compare(clientv3.CreateRevision(a.claimKey), "=", 0)
	put := clientv3.OpPut(a.claimKey, a.record(now, backend.Timestamp{}), clientv3.WithLease(clientv3.LeaseID(a.req.Lease)))
	// Ops of a Txn run in order: this Get sees the queue before our Put.
	ahead := a.queue.newest

	a.mayExist = true
	var resp *clientv3.TxnResponse
	for backoff := minWatchBackoff; ; backoff = min(2*backoff, maxWatchBackoff) {
		var err error
		resp, err = a.b.cli.Txn(ctx).If(notYet).Then(a.withStamp(ahead, put)...).Commit()
		if err == nil {
			break
		}
		// Tried again, the Txn finds the claim if the lost attempt made it
		// and adopts it.
		if err := a.retryAfter(ctx, err, backoff); err != nil {
			return err
		}
	}
	if !resp.Succeeded {
		return a.adopt(ctx, now)
	}
	if err := a.setToken(resp.Header.Revision); err != nil {
		return err
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		a.acquiredAt = now
		a.keepStamp(resp, 2)
		return nil // the queue was empty: we hold the key
	}
	return a.waitInQueue(ctx, string(kvs[0].Key), resp.Header.Revision)
}

// adopt continues an enqueue that found a claim under our name already: it
// reads that claim and the head of the queue and, if the claim is bound to
// our lease, takes it as ours (holding the key if it is the head, else
// waiting in the queue). A claim of another lease is a stray, and one that
// has gone meanwhile is reported lost.
func (a *acquisition) adopt(ctx context.Context, now time.Time) error {
	head := clientv3.OpGet(a.queue.dir, oldestKey...)
	resp, err := a.b.cli.Txn(ctx).Then(a.withStamp(clientv3.OpGet(a.claimKey), head)...).Commit()
	if err != nil {
		return rpcError(ctx, "acquire", err)
	}
	own := resp.Responses[0].GetResponseRange().GetKvs()
	if len(own) == 0 {
		return a.lostError() // deleted since the enqueue saw it
	}
	if own[0].Lease != int64(a.req.Lease) {
		return a.stray(own[0].CreateRevision)
	}
	if err := a.setToken(own[0].CreateRevision); err != nil {
		return err
	}
	if hk := resp.Responses[1].GetResponseRange().GetKvs(); len(hk) > 0 && hk[0].CreateRevision == a.token {
		a.acquiredAt = recordedAt(own[0].Value, now)
		a.keepStamp(resp, 2)
		return nil
	}
	return a.waitInQueue(ctx, "", 0)
}

// recordedAt returns the acquired-at stored in a claim value, or def if the
// value cannot be read.
func recordedAt(v []byte, def time.Time) time.Time {
	if r, err := decodeClaim(v); err == nil && !r.AcquiredAt.IsZero() {
		return r.AcquiredAt
	}
	return def
}

// waitInQueue waits until the claim is the oldest of its queue. pred is the
// claim just ahead as read at revision rev ("" to look it up first).
//
// Each round watches only pred's delete - a release wakes just the next
// waiter - and then runs one Txn that, if our claim still exists (the
// Jepsen fix: a waiter whose claim vanished must not go on to hold the key)
// and no older claim is left, stamps our claim with the acquired-at time
// and reads the previous stamp; otherwise it returns our claim and the
// nearest older claim, which may be one that was queued before pred.
//
// While etcd cannot be reached the wait goes on (see retryAfter).
func (a *acquisition) waitInQueue(ctx context.Context, pred string, rev int64) error {
	backoff := minWatchBackoff
	for {
		if pred != "" {
			if err := a.waitDeleted(ctx, pred, rev+1); err != nil {
				return err
			}
		}
		now := time.Now()
		// True iff every claim of the queue was created at or after ours.
		first := clientv3.Compare(clientv3.CreateRevision(a.queue.dir), ">", a.token-1).WithPrefix()
		older := clientv3.OpGet(a.queue.dir, append(newestKey[:len(newestKey):len(newestKey)], clientv3.WithMaxCreateRev(a.token-1))...)
		resp, err := a.b.cli.Txn(ctx).If(a.ownExists(), first).
			Then(a.withStamp(clientv3.OpPut(a.claimKey, a.record(now, backend.Timestamp{}), clientv3.WithIgnoreLease()))...).
			Else(clientv3.OpGet(a.claimKey), older).
			Commit()
		if err != nil {
			if err := a.retryAfter(ctx, err, backoff); err != nil {
				return err
			}
			backoff = min(2*backoff, maxWatchBackoff)
			pred = "" // the Txn tells who is ahead now
			continue
		}
		if resp.Succeeded {
			a.acquiredAt = now
			a.keepStamp(resp, 1)
			return nil
		}
		own := resp.Responses[0].GetResponseRange().GetKvs()
		if len(own) == 0 || own[0].CreateRevision != a.token {
			return a.lostError()
		}
		kvs := resp.Responses[1].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return a.inconsistent() // the compare saw an older claim, the read did not
		}
		pred, rev = string(kvs[0].Key), resp.Header.Revision
	}
}

// stray reports a claim found under our lent name but bound to another
// lease: an earlier acquisition's write that etcd applied after that
// acquisition had already removed its claim (a request delayed past its
// own cleanup). It is no live acquisition's claim. Setting the token to its
// create revision makes Acquire's cleanup remove exactly that incarnation,
// so the key is not blocked by it; the name is lent again only after that.
func (a *acquisition) stray(rev int64) error {
	a.token = rev
	return fmt.Errorf("%w: etcd acquire %q: claim name %s is taken by a stray claim of another lease",
		backend.ErrUnavailable, a.req.Key, a.name)
}

// inconsistent reports a Txn whose compares and reads disagree, which etcd's
// atomic Txns rule out; returning beats retrying in a tight loop.
func (a *acquisition) inconsistent() error {
	return fmt.Errorf("%w: etcd acquire %q: inconsistent Txn response", backend.ErrUnavailable, a.req.Key)
}

// retryAfter decides what a waiting acquisition does after a request of
// its failed with err. While etcd is merely out of reach (codes.Unavailable:
// a member down, no leader, a connection lost mid-call) the claim keeps its
// place as long as its lease lives, so retryAfter waits d and returns nil:
// try again. It returns the error to give up with when err is of another
// kind, or when ctx ends, the claim is lost or the Backend closes first.
// The client ends ctx itself once it stops trusting the lease.
func (a *acquisition) retryAfter(ctx context.Context, err error, d time.Duration) error {
	if ctx.Err() != nil || status.Code(err) != codes.Unavailable {
		return rpcError(ctx, "acquire", err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-a.e.lost:
		return a.lostError()
	case <-ctx.Done():
		return rpcError(ctx, "acquire", err)
	case <-a.b.ctx.Done():
		return closedError("acquire")
	}
}
