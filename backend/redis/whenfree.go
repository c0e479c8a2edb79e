package redis

import (
	"context"
	"strconv"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

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
			return a.wait(ctx, r.queues, time.Time{})
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
		// Every run so far answered, none added the claim (a late copy of
		// one is still tracked by its name, see removeLeftBehind).
		a.b.reg.waitOutside(a.t, true)
		err = a.sleep(ctx, s)
		a.b.reg.waitOutside(a.t, false)
		if err != nil {
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
	s := standing{free: true, soon: -1, leases: []backend.LeaseID{a.req.Lease}, readAt: time.Now()}
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
			s.takePermit(a.keys[k], q, a.kind.Permits, i)
		}
	}
	return s
}
