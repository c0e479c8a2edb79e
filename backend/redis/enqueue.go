package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// enqueueReply is what enqueueScript answered.
type enqueueReply struct {
	status string
	token  uint64
	own    queued     // "exists": the claim found under the request's ID
	queues [][]queued // "queued", "exists", "changed": the keys' queues
	key    string     // "mismatch": the key
	at     time.Time  // "ok": the acquisition time; "queued": the server's clock at the read
	stamp  string     // "ok"
}

// replyLen is the least number of elements of each of enqueueScript's
// replies: a shorter one is refused rather than read past its end.
var replyLen = map[string]int{"nolease": 1, "mismatch": 2, "changed": 1, "ok": 4, "queued": 3, "exists": 2}

// enqueue runs enqueueScript in mode ("fair" or "cond", see there).
func (a *acquisition) enqueue(ctx context.Context, mode string, permit int, expect []string) (enqueueReply, error) {
	args := make([]any, 0, 14+2*len(a.keys))
	args = append(args, a.b.lay.tag, a.req.ID, int64(a.req.Lease), a.kind.Permits, flag(a.kind.Shared), mode, permit,
		a.req.Owner, a.req.Value, flag(a.req.Stamp != nil), flag(a.placedOnJoin()), flag(a.joinsLazily()),
		backend.Ahead(a.kind), len(a.keys))
	for _, k := range a.keys {
		args = append(args, k)
	}
	for _, e := range expect {
		args = append(args, e)
	}
	a.mayExist = true
	a.readGaps = a.b.reg.gapCount()
	v, err := enqueueScript.Run(ctx, a.b.c, []string{a.b.lay.token()}, args...).Slice()
	if err != nil {
		return enqueueReply{}, a.b.fail(ctx, "acquire", err)
	}
	r, err := parseEnqueueReply(v)
	if err != nil {
		return enqueueReply{}, fmt.Errorf("%w: redis acquire %q: %w", backend.ErrUnavailable, a.req.Key, err)
	}
	switch r.status {
	case "nolease", "mismatch", "changed":
		a.mayExist = false // the script added nothing
	}
	return r, nil
}

// parseEnqueueReply reads what enqueueScript answered; an unknown or
// malformed reply is an error, with the status read if any.
func parseEnqueueReply(v []any) (enqueueReply, error) {
	var err error
	r := enqueueReply{}
	if len(v) > 0 {
		r.status, _ = v[0].(string)
	}
	switch {
	case len(v) < replyLen[r.status]:
		err = fmt.Errorf("reply %q with %d elements", r.status, len(v))
	case r.status == "mismatch":
		r.key, _ = v[1].(string)
	case r.status == "ok":
		r.token, err = parseToken(v[1])
		if err == nil {
			r.at, err = parseMillis(v[2])
		}
		if err == nil {
			r.stamp, _ = v[3].(string)
		}
	case r.status == "queued":
		if r.token, err = parseToken(v[1]); err == nil {
			r.at, err = parseMillis(v[2])
		}
		if err == nil {
			r.queues, err = parseQueues(v[3:])
		}
	case r.status == "exists":
		rec, _ := v[1].(string)
		if err = parseRecord(rec, &r.own); err == nil {
			r.token = r.own.token
			r.queues, err = parseQueues(v[2:])
		}
	case r.status == "changed":
		r.queues, err = parseQueues(v[1:])
	case r.status == "nolease":
	default:
		err = fmt.Errorf("unknown reply %q", r.status)
	}
	return r, err
}

// placedOnJoin reports whether the claim is recorded as admitted when it
// joins: nothing but the claims ahead keeps a claim on one key that takes
// no permit from holding, so its place in the queue is its admission.
func (a *acquisition) placedOnJoin() bool { return a.req.Keys == nil && !a.kind.Counted() }

// joinsLazily reports whether the claim, when it queues behind others, may
// be added without waiting for the disk (see enqueueScript): the rule
// admits it only with nothing ahead (backend.HoldsAlone), so it holds
// nothing until a claim ahead departs, and that departure, a write, writes
// it first. A crash before then loses it; its wait then joins again (see
// queue).
func (a *acquisition) joinsLazily() bool { return backend.HoldsAlone(a.kind) }

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
