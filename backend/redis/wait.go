package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// queue is the path of fair waiting requests: join the queues, then wait
// until the rule admits the claim at every key. A claim that joined
// without waiting for the disk and is found gone while its lease lives was
// lost by a crash of the server before anything settled it (see
// enqueueScript): it joins again, at the back. (Had its lease ended, the
// join finds that and fails.)
func (a *acquisition) queue(ctx context.Context) error {
	for {
		err := a.join(ctx)
		if !errors.Is(err, errJoinLost) {
			return err
		}
	}
}

// errJoinLost is a claim that joined lazily found gone while waiting.
var errJoinLost = errors.New("the claim's join was lost")

// join joins the queues once and waits.
func (a *acquisition) join(ctx context.Context) error {
	a.b.reg.disarm(a.w)
	// An empty queue admits a claim of any kind, a counted one with the
	// lowest permit.
	first, _ := backend.PermitFor(nil, a.kind.Permits, 0)
	r, err := a.enqueue(ctx, "fair", first, nil)
	if err != nil {
		return err
	}
	switch r.status {
	case "ok":
		return a.holds(r, first)
	case "queued":
		// The claims the rule reads ahead of the claim, as the run that
		// queued it found them: a read like any other.
		a.token = r.token
		for i := range r.queues {
			r.queues[i] = append(r.queues[i], queued{id: a.req.ID, token: r.token, kind: a.kind, admitted: a.placedOnJoin(), permit: backend.NoPermit})
		}
		return a.wait(ctx, r.queues, r.at)
	case "exists":
		// A claim under our ID that a lost reply of this request added.
		a.token = r.token
		return a.wait(ctx, r.queues, time.Time{})
	default:
		return a.refused(r)
	}
}

// wait waits until the rule admits the claim at every key, then records
// its admission. qs are its keys' queues as last read, and readAt the
// server's clock at that read (zero if not known).
func (a *acquisition) wait(ctx context.Context, qs [][]queued, readAt time.Time) error {
	recorded := false // qs come from a handoff whose run recorded the time
	for {
		if err := a.b.closedErr("acquire"); err != nil {
			return err
		}
		if a.t.isLost() {
			return a.lostError()
		}
		w, own, err := a.standing(qs)
		if errors.Is(err, backend.ErrLeaseExpired) && a.joinsLazily() && !a.t.isLost() {
			return errJoinLost
		}
		if err != nil {
			return err
		}
		if w.free && a.placed(own) && !readAt.IsZero() {
			// Already recorded as admitted, and nothing but its place in
			// the queue stood between it and holding: the read that found
			// it free, or the release it heard (handedOff), is its
			// handoff. The release of a claim that held alone records the
			// time in the claim behind it (h.recorded, see drop in
			// scripts.go); otherwise it goes to Redis after the fact (see
			// Acquire), so that a handoff stays one write.
			a.at, a.permit, a.recordAt = readAt, 0, !recorded
			return nil
		}
		if w.free {
			permit := 0
			if a.kind.Counted() {
				if own.admitted {
					permit = own.permit
				} else {
					permit = w.permit
				}
			}
			return a.admit(ctx, permit)
		}
		if err := a.sleep(ctx, w); err != nil {
			return err
		}
		// Woken only because the server confirmed the subscriptions
		// sleep made: the claims waited for may have changed before,
		// unheard. Only their departure or admission can change the
		// claim's standing (backend.WaitFor), so if they are as read
		// the standing is too, and it waits again without a read of the
		// whole queue ahead.
		for a.b.reg.onlyConfirmed(a.w) {
			same, err := a.unchanged(ctx, w.want)
			if err != nil {
				return err
			}
			if !same {
				break
			}
			if err := a.sleep(ctx, w); err != nil {
				return err
			}
		}
		h := a.b.reg.lastHandoff(a.w, a.readGaps)
		if q, ok := a.handedOff(qs, h); ok {
			qs, readAt, recorded = q, h.at, h.recorded
			continue
		}
		recorded = false
		if qs, readAt, err = a.read(ctx); err != nil {
			return err
		}
	}
}

// unchanged reports whether each claim in want is still queued, and
// admitted or not as when read.
func (a *acquisition) unchanged(ctx context.Context, want []wanted) (bool, error) {
	args := make([]any, 0, 2+2*len(want))
	args = append(args, a.b.lay.tag, len(want))
	for _, e := range want {
		args = append(args, e.key, strconv.FormatUint(e.token, 10))
	}
	v, err := recordsScript.Run(ctx, a.b.c, []string{a.b.lay.token()}, args...).StringSlice()
	if err != nil {
		return false, a.b.fail(ctx, "acquire", err)
	}
	if len(v) != len(want) {
		return false, nil
	}
	for i, e := range want {
		var c queued
		if v[i] == "" || parseRecord(v[i], &c) != nil || c.admitted != e.admitted {
			return false, nil
		}
	}
	return true, nil
}

// standing is what the rule says of a claim, given its keys' queues.
type standing struct {
	free   bool
	permit int      // when free and counted: the permit to take
	want   []wanted // when not: the claims whose departure (or admission) may free it
	leases []backend.LeaseID
	soon   time.Duration // the earliest end of those claims' leases; negative if none
	readAt time.Time     // when soon was read
}

// standing reads where the claim stands in qs, which hold it at each key.
func (a *acquisition) standing(qs [][]queued) (standing, queued, error) {
	s := standing{free: true, soon: -1, leases: []backend.LeaseID{a.req.Lease}, readAt: time.Now()}
	var own queued
	for k, q := range qs {
		i := -1
		for j := range q {
			if q[j].id == a.req.ID && q[j].token == a.token {
				i = j
				break
			}
		}
		if i < 0 {
			return s, own, a.lostError()
		}
		own = q[i]
		ks := kinds(q)
		if i < backend.FreePrefix(ks) {
			if a.kind.Counted() {
				s.takePermit(a.keys[k], q, a.kind.Permits, i)
			}
			continue
		}
		s.free = false
		s.addWait(a.keys[k], q, backend.WaitFor(ks, i))
	}
	return s, own, nil
}

// takePermit records the permit a counted claim at index i of queue q of
// key takes (backend.PermitFor), or, while a claim ahead has not recorded
// its own, that claim's admission as what to wait for.
func (s *standing) takePermit(key string, q []queued, n, i int) {
	permits := make([]int, i)
	for j := range permits {
		permits[j] = q[j].permit
	}
	p, wf := backend.PermitFor(permits, n, i)
	if wf >= 0 {
		s.free = false
		s.add(key, q[wf], true)
	}
	s.permit = p
}

// addWait adds what w says to wait for in queue q of key.
func (s *standing) addWait(key string, q []queued, w backend.Wait) {
	for j := w.From; j <= w.To; j++ {
		s.add(key, q[j], w.Admission && j == w.To)
	}
}

// add waits for c's departure, and its admission too if admission.
func (s *standing) add(key string, c queued, admission bool) {
	s.want = append(s.want, wanted{claimEvent{key: key, token: c.token}, admission, c.admitted})
	s.leases = append(s.leases, c.lease)
	if c.pttl >= 0 && (s.soon < 0 || c.pttl < s.soon) {
		s.soon = c.pttl
	}
}

// toldBehind reports whether the claim learns of the removal of the claim
// just ahead of it on the Backend's own channel (see registry.direct): a
// claim on one key that the rule has wait for the claim just ahead alone
// (backend.Ahead), named by this Backend, whose channel the removal is
// published on.
func (a *acquisition) toldBehind() bool {
	return a.req.Fair && a.req.Keys == nil && backend.Ahead(a.kind) == 1 && a.b.names.Made(a.req.ID)
}

// sleep waits for one of the events s names, the end of the earliest lease
// among them, ctx's end or Close. It returns at once when such an event
// came while the queues were being read.
func (a *acquisition) sleep(ctx context.Context, s standing) error {
	if !a.b.reg.arm(a.w, s.want, s.leases) {
		return nil
	}
	var expiry <-chan time.Time
	if s.soon >= 0 {
		// Just past the lease's end by the server's count: the read that
		// follows finds the lease gone and reaps its claims.
		t := time.NewTimer(s.soon + time.Millisecond - time.Since(s.readAt))
		defer t.Stop()
		expiry = t.C
	}
	select {
	case <-a.w.wake:
	case <-expiry:
	case <-ctx.Done():
		return fmt.Errorf("redis acquire %q: %w", a.req.Key, backend.ContextError(ctx))
	case <-a.b.done:
		return a.b.closedErr("acquire")
	}
	a.b.reg.disarm(a.w)
	return nil
}

// handedOff returns the claim's queue up to itself after h, if h is the
// departure of the claim just ahead of it in qs from the head of the
// queue: the claim alone. (A departure heard before qs was read names no
// claim in it.) Nothing was ahead of that claim then, and claims only join at the
// back (tokens only grow), so nothing is ahead of this one from then on;
// the rule is asked of that queue as of one read, without a read. It holds
// for one key only (the others may not be free); the claim's own presence,
// which a read would confirm, rests on its lease: its claims leave only
// with it or by its release, and a lease the server let expire is past the
// client's own deadline too (guarantee 3), so a guard on it is refused; a
// join held back from the disk is written by the very release heard, and
// a crash that lost it broke the subscriber's stream (see below). A
// lease deleted is heard, before the release, only through its keyspace
// notification: without notifications, or when the subscriber's stream
// broke since the read (registry.lastHandoff then names no departure), the
// claim reads its queue instead, which finds it gone with its lease.
func (a *acquisition) handedOff(qs [][]queued, h handoff) ([][]queued, bool) {
	if !a.b.notify || h.at.IsZero() || len(qs) != 1 || h.key != a.keys[0] {
		return nil, false
	}
	q := qs[0]
	for i := 1; i < len(q); i++ {
		if q[i].id == a.req.ID && q[i].token == a.token {
			return [][]queued{{q[i]}}, q[i-1].token == h.token
		}
	}
	return nil, false
}

// read reads the claim's keys' queues up to the claim itself (the claims
// behind it have no say in its standing), reaping the claims of ended
// leases among them.
func (a *acquisition) read(ctx context.Context) ([][]queued, time.Time, error) {
	a.readGaps = a.b.reg.gapCount()
	return a.b.queues(ctx, a.keys, strconv.FormatUint(a.token, 10))
}

// queues runs stateScript for keys, listing each queue's claims with
// tokens up to upto ("+inf" for all), and returns the server's clock at
// the read.
func (b *Backend) queues(ctx context.Context, keys []string, upto string) ([][]queued, time.Time, error) {
	args := make([]any, 0, 2+2*len(keys))
	args = append(args, b.lay.tag, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	for range keys {
		args = append(args, upto)
	}
	v, err := stateScript.Run(ctx, b.c, []string{b.lay.token()}, args...).Slice()
	if err != nil {
		return nil, time.Time{}, b.fail(ctx, "read", err)
	}
	var qs [][]queued
	var at time.Time
	if len(v) != len(keys)+1 {
		err = fmt.Errorf("%w: %d replies for %d keys", errRecord, len(v), len(keys))
	} else if qs, err = parseQueues(v[:len(keys)]); err == nil {
		at, err = parseMillis(v[len(keys)])
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: redis read %q: %w", backend.ErrUnavailable, keys[0], err)
	}
	return qs, at, nil
}

// admitArgs are admitScript's arguments for claim id with token at keys:
// the permit it takes, whether the highest stamp is wanted, and at, the
// acquisition time in ms, or "" for the server's clock now.
func (b *Backend) admitArgs(id string, token uint64, permit int, wantStamp bool, at string, keys []string) []any {
	args := make([]any, 0, 7+len(keys))
	args = append(args, b.lay.tag, id, strconv.FormatUint(token, 10), permit, flag(wantStamp), at, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	return args
}

// placed reports whether the claim, own as read, holds as soon as the rule
// finds it free, without a write: its enqueue recorded it as admitted
// (placed, see enqueueScript), it takes no permit, and no stamp needs
// reading and recording before it starts.
func (a *acquisition) placed(own queued) bool {
	return own.admitted && !a.kind.Counted() && a.req.Stamp == nil
}

// admit records that the claim holds its keys with permit.
func (a *acquisition) admit(ctx context.Context, permit int) error {
	args := a.b.admitArgs(a.req.ID, a.token, permit, a.req.Stamp != nil, "", a.keys)
	v, err := admitScript.Run(ctx, a.b.c, []string{a.b.lay.token()}, args...).Slice()
	if err != nil {
		return a.b.fail(ctx, "acquire", err)
	}
	if len(v) == 0 {
		return fmt.Errorf("%w: redis acquire %q: empty reply", backend.ErrUnavailable, a.req.Key)
	}
	if s, _ := v[0].(string); s != "ok" || len(v) != 3 {
		return a.lostError()
	}
	at, err := parseMillis(v[1])
	if err != nil {
		return fmt.Errorf("%w: redis acquire %q: %w", backend.ErrUnavailable, a.req.Key, err)
	}
	a.at, a.permit = at, permit
	s, _ := v[2].(string)
	return a.keepStamp(s)
}
