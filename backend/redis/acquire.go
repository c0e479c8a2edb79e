package redis

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/ash-lock/ashlock/backend"
)

// maxIDLen bounds a claim ID, which is part of several hash fields.
const maxIDLen = 128

// Acquire adds a claim on req.Key (on every key of req.Keys) bound to
// req.Lease, named req.ID (a fresh UUID when empty), and returns it once
// it holds the key.
//
// A fair waiting request joins each key's queue in one script run, which
// uncontended also makes it the holder: one round trip. Otherwise it
// waits for the claims package backend's WaitFor names (woken by their
// events, or by a timer at the end of their lease), reads its queues again
// and, once the rule admits it everywhere, records its admission (and
// permit) in one more script run compared on its identity. Requests that
// do not queue (Wait or Fair false) add their claim only in a script run
// that finds the queues as they last read them, with the claim admitted.
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
		req.ID = uuid.NewString()
	} else if err := checkID(req.ID); err != nil {
		return backend.Claim{}, err
	}
	if req.Lease <= 0 {
		return backend.Claim{}, fmt.Errorf("%w: redis acquire %q: no lease", backend.ErrLeaseExpired, req.Key)
	}
	a := &acquisition{b: b, req: req, keys: req.AllKeys(), kind: backend.KindOf(&req), permit: backend.NoPermit}
	a.t = b.reg.track(req.Lease, req.OnLost)
	if req.Wait {
		a.w = b.reg.watch(a.keys, false)
		defer b.reg.unwatch(a.w)
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
	return backend.Claim{
		Key: req.Key, Keys: req.Keys, ID: req.ID, Lease: req.Lease, Token: a.token,
		AcquiredAt: a.at, Stamp: a.stamp, Shared: req.Shared, Permits: a.kind.Permits,
		Permit: max(a.permit, 0), Value: bytes.Clone(req.Value),
	}, nil
}

// checkID reports why id cannot name a claim: it is part of hash fields
// ("<id>:o") and of lease index entries ("<id>\n<key>").
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

// enqueueReply is what enqueueScript answered.
type enqueueReply struct {
	status string
	token  uint64
	own    queued     // "exists": the claim found under the request's ID
	queues [][]queued // "queued", "exists", "changed": the keys' queues
	key    string     // "mismatch": the key
	at     time.Time  // "ok"
	stamp  string     // "ok"
}

// enqueue runs enqueueScript in mode ("fair" or "cond", see there).
func (a *acquisition) enqueue(ctx context.Context, mode string, permit int, expect []string) (enqueueReply, error) {
	placed := "0"
	if a.req.Keys == nil && !a.kind.Counted() {
		// Nothing but the claims ahead keeps such a claim from holding:
		// its place in the queue is its admission.
		placed = "1"
	}
	args := make([]any, 0, 12+2*len(a.keys))
	args = append(args, a.b.lay.tag, a.req.ID, int64(a.req.Lease), a.kind.Permits, flag(a.kind.Shared), mode, permit,
		a.req.Owner, a.req.Value, flag(a.req.Stamp != nil), placed, len(a.keys))
	for _, k := range a.keys {
		args = append(args, k)
	}
	for _, e := range expect {
		args = append(args, e)
	}
	a.mayExist = true
	v, err := enqueueScript.Run(ctx, a.b.c, []string{a.b.lay.token()}, args...).Slice()
	if err != nil {
		return enqueueReply{}, a.b.fail(ctx, "acquire", err)
	}
	r := enqueueReply{}
	r.status, _ = v[0].(string)
	switch r.status {
	case "nolease", "mismatch", "changed":
		a.mayExist = false // the script added nothing
	}
	switch r.status {
	case "mismatch":
		r.key, _ = v[1].(string)
	case "ok":
		r.token, err = parseToken(v[1])
		if err == nil {
			r.at, err = parseMillis(v[2])
		}
		if err == nil {
			r.stamp, _ = v[3].(string)
		}
	case "queued":
		if r.token, err = parseToken(v[1]); err == nil {
			r.queues, err = parseQueues(v[2:])
		}
	case "exists":
		rec, _ := v[1].(string)
		if err = parseRecord(rec, &r.own); err == nil {
			r.token = r.own.token
			r.queues, err = parseQueues(v[2:])
		}
	case "changed":
		r.queues, err = parseQueues(v[1:])
	case "nolease":
	default:
		err = fmt.Errorf("unknown reply %q", r.status)
	}
	if err != nil {
		return enqueueReply{}, fmt.Errorf("%w: redis acquire %q: %w", backend.ErrUnavailable, a.req.Key, err)
	}
	return r, nil
}

// refused turns a reply that added nothing into the Acquire's error.
func (a *acquisition) refused(r enqueueReply) error {
	switch r.status {
	case "nolease":
		return fmt.Errorf("%w: redis acquire %q: lease %d has ended", backend.ErrLeaseExpired, a.req.Key, a.req.Lease)
	case "mismatch":
		return fmt.Errorf("redis acquire %q: %d permits, the claims queued at %q have another count: %w",
			a.req.Key, a.kind.Permits, r.key, backend.ErrPermitMismatch)
	}
	return nil
}

// holds records the admission an "ok" reply reports.
func (a *acquisition) holds(r enqueueReply, permit int) error {
	a.token, a.at, a.permit = r.token, r.at, permit
	return a.keepStamp(r.stamp)
}

func (a *acquisition) keepStamp(s string) error {
	if a.req.Stamp == nil {
		return nil
	}
	st, err := parseStamp(s)
	if err != nil {
		return fmt.Errorf("%w: redis acquire %q: %w", backend.ErrUnavailable, a.req.Key, err)
	}
	a.prevStamp = st
	return nil
}

// queue is the path of fair waiting requests: join the queues, then wait
// until the rule admits the claim at every key.
func (a *acquisition) queue(ctx context.Context) error {
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
		a.token = r.token
		for i := range r.queues {
			r.queues[i] = append(r.queues[i], queued{id: a.req.ID, token: r.token, kind: a.kind, permit: backend.NoPermit})
		}
	case "exists":
		// A claim under our ID that a lost reply of this request added.
		a.token = r.token
	default:
		return a.refused(r)
	}
	return a.wait(ctx, r.queues)
}

// wait waits until the rule admits the claim at every key, then records
// its admission. qs are its keys' queues as last read.
func (a *acquisition) wait(ctx context.Context, qs [][]queued) error {
	for {
		if err := a.b.closedErr("acquire"); err != nil {
			return err
		}
		if a.t.isLost() {
			return a.lostError()
		}
		w, own, err := a.standing(qs)
		if err != nil {
			return err
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
		if qs, err = a.read(ctx); err != nil {
			return err
		}
	}
}

// standing is what the rule says of a claim, given its keys' queues.
type standing struct {
	free   bool
	permit int      // when free and counted: the permit to take
	want   []wanted // when not: the claims whose departure (or admission) may free it
	leases []backend.LeaseID
	soon   time.Duration // the earliest end of those claims' leases; negative if none
}

// standing reads where the claim stands in qs, which hold it at each key.
func (a *acquisition) standing(qs [][]queued) (standing, queued, error) {
	s := standing{free: true, soon: -1, leases: []backend.LeaseID{a.req.Lease}}
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
				permits := make([]int, i+1)
				for j := range permits {
					permits[j] = q[j].permit
				}
				p, wf := backend.PermitFor(permits, a.kind.Permits, i)
				if wf >= 0 {
					s.free = false
					s.add(a.keys[k], q[wf], true)
				}
				s.permit = p
			}
			continue
		}
		s.free = false
		s.addWait(a.keys[k], q, backend.WaitFor(ks, i))
	}
	return s, own, nil
}

// addWait adds what w says to wait for in queue q of key.
func (s *standing) addWait(key string, q []queued, w backend.Wait) {
	for j := w.From; j <= w.To; j++ {
		s.add(key, q[j], w.Admission && j == w.To)
	}
}

// add waits for c's departure, and its admission too if admission.
func (s *standing) add(key string, c queued, admission bool) {
	s.want = append(s.want, wanted{claimEvent{key: key, token: c.token}, admission})
	s.leases = append(s.leases, c.lease)
	if c.pttl >= 0 && (s.soon < 0 || c.pttl < s.soon) {
		s.soon = c.pttl
	}
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
		t := time.NewTimer(s.soon + time.Millisecond)
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

// read reads the claim's keys' queues, reaping the claims of ended leases.
func (a *acquisition) read(ctx context.Context) ([][]queued, error) {
	return a.b.queues(ctx, a.keys)
}

// queues runs stateScript for keys.
func (b *Backend) queues(ctx context.Context, keys []string) ([][]queued, error) {
	args := make([]any, 0, 2+len(keys))
	args = append(args, b.lay.tag, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	v, err := stateScript.Run(ctx, b.c, []string{b.lay.token()}, args...).Slice()
	if err != nil {
		return nil, b.fail(ctx, "read", err)
	}
	qs, err := parseQueues(v)
	if err != nil {
		return nil, fmt.Errorf("%w: redis read %q: %w", backend.ErrUnavailable, keys[0], err)
	}
	return qs, nil
}

// admit records that the claim holds its keys with permit.
func (a *acquisition) admit(ctx context.Context, permit int) error {
	args := make([]any, 0, 6+len(a.keys))
	args = append(args, a.b.lay.tag, a.req.ID, strconv.FormatUint(a.token, 10), permit, flag(a.req.Stamp != nil), len(a.keys))
	for _, k := range a.keys {
		args = append(args, k)
	}
	v, err := admitScript.Run(ctx, a.b.c, []string{a.b.lay.token()}, args...).Slice()
	if err != nil {
		return a.b.fail(ctx, "acquire", err)
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

// whenFree is the path of requests that do not queue: add the claim,
// admitted, only in a script run that finds the queues as last read, when
// a claim added to them would be free at every key.
func (a *acquisition) whenFree(ctx context.Context) error {
	expect := make([]string, len(a.keys))
	for i := range expect {
		expect[i] = "0" // first try: the queues are empty
	}
	permit, _ := backend.PermitFor(nil, a.kind.Permits, 0)
	for races := 0; ; {
		if err := a.b.closedErr("acquire"); err != nil {
			return err
		}
		if a.w != nil {
			a.b.reg.disarm(a.w)
		}
		r, err := a.enqueue(ctx, "cond", permit, expect)
		if err != nil {
			return err
		}
		switch r.status {
		case "ok":
			return a.holds(r, permit)
		case "exists":
			// A lost reply: the claim was added, admitted, by an earlier try.
			a.token = r.token
			return a.wait(ctx, r.queues)
		case "changed":
		default:
			return a.refused(r)
		}
		s := a.standingNew(r.queues, expect)
		if s.free {
			permit = s.permit
			if races++; races > 3 && !a.req.Wait {
				return a.lockedError() // the queues keep changing under us
			}
			continue
		}
		if !a.req.Wait {
			return a.lockedError()
		}
		if err := a.sleep(ctx, s); err != nil {
			return err
		}
		// The queues were not free as read, so the next run must not add
		// the claim whatever it finds: it only reads them again.
		for i := range expect {
			expect[i] = "-"
		}
	}
}

// standingNew is where a claim added now to qs would stand; it sets
// expect to the newest token of each queue.
func (a *acquisition) standingNew(qs [][]queued, expect []string) standing {
	s := standing{free: true, soon: -1, leases: []backend.LeaseID{a.req.Lease}}
	for k, q := range qs {
		expect[k] = "0"
		if len(q) > 0 {
			expect[k] = strconv.FormatUint(q[len(q)-1].token, 10)
		}
		ks := append(kinds(q), a.kind)
		i := len(q)
		if i >= backend.FreePrefix(ks) {
			s.free = false
			s.addWait(a.keys[k], q, backend.WaitFor(ks, i))
			continue
		}
		if a.kind.Counted() {
			permits := make([]int, i+1)
			for j := range q {
				permits[j] = q[j].permit
			}
			permits[i] = backend.NoPermit
			p, wf := backend.PermitFor(permits, a.kind.Permits, i)
			if wf >= 0 {
				s.free = false
				s.add(a.keys[k], q[wf], true)
			}
			s.permit = p
		}
	}
	return s
}

// stampIt calls the request's Stamp with the highest stamp of the keys and
// records the result, compared on the claim's identity.
func (a *acquisition) stampIt(ctx context.Context) error {
	st, err := a.req.Stamp(a.prevStamp)
	if err != nil {
		return fmt.Errorf("redis acquire %q: stamp: %w", a.req.Key, err)
	}
	args := make([]any, 0, 5+len(a.keys))
	args = append(args, a.b.lay.tag, a.req.ID, strconv.FormatUint(a.token, 10), formatStamp(st), len(a.keys))
	for _, k := range a.keys {
		args = append(args, k)
	}
	ok, err := stampScript.Run(ctx, a.b.c, []string{a.b.lay.token()}, args...).Int64()
	if err != nil {
		return a.b.fail(ctx, "acquire", err)
	}
	if ok != 1 {
		return a.lostError()
	}
	a.stamp = st
	return nil
}

func (a *acquisition) lostError() error {
	return fmt.Errorf("%w: redis acquire %q: the claim vanished (its lease ended or it was deleted)",
		backend.ErrLeaseExpired, a.req.Key)
}

func (a *acquisition) lockedError() error {
	return fmt.Errorf("redis acquire %q: %w", a.req.Key, backend.ErrLocked)
}

// discard removes the claim of a failed Acquire by its ID, whatever its
// token, with a bounded context of its own: the caller's may have ended.
// The ID is the acquisition's own, so nothing else can be removed.
func (b *Backend) discard(id string, keys []string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := b.release(ctx, id, "", keys); err != nil {
		b.log.Warn("redis: removing the claim of a failed acquire failed; it goes when its lease ends",
			"key", keys[0], "error", err)
	}
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
