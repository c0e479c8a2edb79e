package redis

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/ash-lock/ashlock/backend"
)

// maxIDLen bounds a claim ID, which is part of several hash fields.
const maxIDLen = 128

// Acquire adds a claim on req.Key (on every key of req.Keys) bound to
// req.Lease, named req.ID (a name of the Backend's own when empty, see
// claimName), and returns it once it holds the key.
//
// A fair waiting request joins each key's queue in one script run, which
// uncontended also makes it the holder: one round trip. The run returns
// the claims ahead that the rule reads; if the rule does not admit the
// claim there, it waits for the claims package backend's WaitFor names
// (woken by their events, or by a timer at the end of their lease), reads
// its queues again and, once the rule admits it everywhere, records its
// admission (and permit) in one more script run compared on its identity.
// A plain exclusive or shared claim on one key without a stamp is recorded
// as admitted when it joins (its place in the queue is its admission), so
// a read that finds it free (the joining run's own, for a reader behind
// readers), or the departure of the claim just ahead from the head of the
// queue (which needs no read, see handedOff), is enough: it holds from
// there. The time it came to hold is written by the release of a claim
// just ahead that held alone (see drop in scripts.go), else once Acquire
// has returned (recordAcquired).
// Requests that do not queue (Wait or Fair false) add their claim only in
// a script run that finds the queues as they last read them, with the
// claim admitted.
//
// Acquire blocks until the claim holds its keys, ctx ends, the claim or
// its lease vanishes (ErrLeaseExpired), Redis fails (ErrUnavailable) or
// the Backend is closed (ErrClosed). When it fails after its claim may
// have been added, even if Redis's reply was lost, it removes the claim by
// its ID with a bounded context of its own. Safe for concurrent use.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Claim, error) {
	if err := b.closedErr("acquire"); err != nil {
		return backend.Claim{}, err
	}
	if ctx.Err() != nil {
		return backend.Claim{}, fmt.Errorf("redis acquire %q: %w", req.Key, backend.ContextError(ctx))
	}
	if err := backend.CheckRequest(&req); err != nil {
		return backend.Claim{}, err
	}
	if req.ID == "" {
		req.ID = b.names.New()
	} else if err := checkID(req.ID); err != nil {
		return backend.Claim{}, err
	}
	if req.Lease <= 0 {
		return backend.Claim{}, fmt.Errorf("%w: redis acquire %q: no lease", backend.ErrLeaseExpired, req.Key)
	}
	a := &acquisition{b: b, req: req, keys: req.AllKeys(), kind: backend.KindOf(&req), permit: backend.NoPermit}
	a.t = b.reg.track(req.Lease, req.ID, req.OnLost, len(a.keys))
	if req.Wait {
		a.w = b.reg.watch(a.keys, false)
		defer b.reg.unwatch(a.w)
		if a.toldBehind() {
			b.reg.direct(a.w, req.ID)
		}
	}
	err := a.run(ctx)
	if err == nil && !b.reg.promote(a.t, claimRef{key: req.Key, token: a.token}) {
		err = a.lostError()
	}
	if err != nil {
		b.reg.untrack(a.t)
		if a.mayExist {
			b.discard(req.ID, a.keys)
		}
		return backend.Claim{}, err
	}
	if a.recordAt {
		b.recordAcquired(req.ID, a.token, a.keys, a.at)
	}
	return backend.Claim{
		Key: req.Key, Keys: req.Keys, ID: req.ID, Lease: req.Lease, Token: a.token,
		AcquiredAt: a.at, Stamp: a.stamp, Shared: req.Shared, Permits: a.kind.Permits,
		Permit: max(a.permit, 0), Value: bytes.Clone(req.Value),
	}, nil
}

// checkID reports why id cannot name a claim: it is part of lease index
// entries ("<id>\n<key>"), and neither control characters nor the
// reserved ':' may be in it.
func checkID(id string) error {
	if len(id) > maxIDLen || strings.ContainsFunc(id, func(r rune) bool { return r == ':' || unicode.IsControl(r) }) {
		return fmt.Errorf("%w: redis acquire: claim ID %q (at most %d bytes, no ':' or control characters)",
			backend.ErrInvalidConfig, id, maxIDLen)
	}
	return nil
}

// acquisition is the state of one Acquire call.
type acquisition struct {
	b    *Backend
	req  backend.AcquireRequest
	keys []string
	kind backend.Kind
	t    *tracked
	w    *watcher // nil unless req.Wait

	mayExist  bool // the claim may be in Redis: remove it on failure
	token     uint64
	permit    int
	at        time.Time
	prevStamp backend.Timestamp // the highest stamp of the keys when admitted
	stamp     backend.Timestamp
	recordAt  bool   // admitted by a read: at goes to Redis once Acquire returns
	readGaps  uint64 // registry.gapCount as the last read of the queues began
}

func (a *acquisition) run(ctx context.Context) error {
	var err error
	if a.req.Wait && a.req.Fair {
		err = a.queue(ctx)
	} else {
		err = a.whenFree(ctx)
	}
	if err != nil || a.req.Stamp == nil {
		return err
	}
	return a.stampIt(ctx)
}

func (a *acquisition) lostError() error {
	return fmt.Errorf("%w: redis acquire %q: the claim vanished (its lease ended or it was deleted)",
		backend.ErrLeaseExpired, a.req.Key)
}

func (a *acquisition) lockedError() error {
	return fmt.Errorf("redis acquire %q: %w", a.req.Key, backend.ErrLocked)
}

// recordAcquired records in Redis, in the background, when the claim id
// with token came to hold keys: at, the server's clock at the read that
// found it free or at a departure it heard that did not record it (the
// release of a claim that held alone records it itself). The claim was recorded as admitted when it joined, with
// that time as its acquisition, so until this lands Inspect and Observe
// show it holding since it joined. The script compares the claim's
// identity, so it changes nothing once the claim has gone (a Release may
// overtake it); it is not retried, and after a failure (or Close) the
// record keeps the time the claim joined.
func (b *Backend) recordAcquired(id string, token uint64, keys []string, at time.Time) {
	args := b.admitArgs(id, token, 0, false, strconv.FormatInt(at.UnixMilli(), 10), keys)
	b.spawn(func() {
		ctx, cancel := context.WithTimeout(b.bg, cleanupTimeout)
		defer cancel()
		if err := admitScript.Run(ctx, b.c, []string{b.lay.token()}, args...).Err(); err != nil && ctx.Err() == nil {
			b.log.Debug("redis: recording when a claim came to hold its key failed; it shows the time it joined",
				"key", keys[0], "error", err)
		}
	})
}

// discard removes the claim of a failed Acquire by its ID, whatever its
// token, each try with a bounded context of its own: the caller's may
// have ended. The ID is the acquisition's own, so nothing else can be
// removed. A removal that fails is tried again in the background (see
// backend.Retry) until it succeeds or the Backend closes; the claim's
// lease ending removes it too.
func (b *Backend) discard(id string, keys []string) {
	try := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		return b.release(ctx, id, "", false, false, keys)
	}
	err := try()
	if err == nil {
		return
	}
	b.log.Warn("redis: removing the claim of a failed acquire failed; trying again in the background",
		"key", keys[0], "error", err)
	b.spawn(func() { backend.Retry(b.done, false, func() bool { return try() == nil }) })
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func parseToken(v any) (uint64, error) {
	s, _ := v.(string)
	return strconv.ParseUint(s, 10, 64)
}

func parseMillis(v any) (time.Time, error) {
	s, _ := v.(string)
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(ms), nil
}
