package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The permits workload: holders take a counted lock of poolPermits permits
// on poolKey and, under it, do read-modify-writes on the fenced register of
// their permit, named key#permit as DESIGN section 9 suggests for a pool of
// resources. Each permit's register is a resource of its own, with its own
// fence and history, so each is checked like the mutex workload's resource:
// one porcupine check per permit, and no lost update. The holders'
// validity intervals are checked per permit against the strict mutex
// model, and in all against the permit count.

const (
	// poolKey is the counted lock. Like lockKey it contains '/'.
	poolKey     = "pool/printers"
	poolPermits = 3
)

// permitResource names the register of permit p.
func permitResource(p int) string { return fmt.Sprintf("%s#%d", poolKey, p) }

// pool holds the permits workload's registers, one per permit. Safe for
// concurrent use (each register is).
type pool struct{ regs []*resource }

func newPool(clk clock, n int, fenced bool) *pool {
	p := &pool{}
	for i := range n {
		p.regs = append(p.regs, newResource(clk, permitResource(i), fenced))
	}
	return p
}

// register returns permit's register, or nil for a permit out of range
// (which the checks report from the acquisitions).
func (p *pool) register(permit int) *resource {
	if permit < 0 || permit >= len(p.regs) {
		return nil
	}
	return p.regs[permit]
}

// byName returns the register called name, or nil.
func (p *pool) byName(name string) *resource {
	if p == nil {
		return nil
	}
	for _, r := range p.regs {
		if r.name == name {
			return r
		}
	}
	return nil
}

// permitsWorkload: the holder's locker is built WithPermits(poolPermits).
type permitsWorkload struct{ pool *pool }

func (permitsWorkload) acquire(ctx context.Context, lk locker, _ *rand.Rand) (held, error) {
	return lk.acquire(ctx)
}

func (w permitsWorkload) step(ctx context.Context, h *holder, hd held) {
	if r := w.pool.register(hd.permit()); r != nil {
		h.resourceStep(ctx, r, hd.token())
	}
}

// permitsResult is what the permits workload's checks found.
type permitsResult struct {
	holders              group
	acquisitions         int
	afterFaults          int
	failedAcquires       int64
	ops                  int                     // over all permits
	refused              int                     // operations the fences refused
	checks               []porcupine.CheckResult // by permit
	viz                  []string                // visualizations of failed checks
	lost, lostAcked      int
	overlaps             []overlap // per permit, strict mutex model
	mostValid            int       // most in-process guards surely valid at one instant
	lostHolds            int
	doneButValid         int
	problems             []string
	acquisitionsByPermit []int
}

// violations counts everything that breaks a guarantee.
func (r *permitsResult) violations() int {
	n := r.lost + len(r.overlaps) + r.doneButValid + len(r.problems)
	for _, c := range r.checks {
		if c != porcupine.Ok {
			n++
		}
	}
	if r.mostValid > poolPermits {
		n++
	}
	return n
}

func (r *permitsResult) String() string {
	checks := make([]string, len(r.checks))
	for i, c := range r.checks {
		checks[i] = fmt.Sprintf("#%d %s", i, c)
	}
	return fmt.Sprintf("permits (%d in-process, %d child holders, %d permits): %d acquisitions %v by permit (%d after the faults), "+
		"%d failed acquires; registers: %d ops (%d refused by the fences), %s, %d lost updates (%d acknowledged); per-permit overlaps: %d; "+
		"most surely valid at once: %d (in-process holds lost: %d); Done-but-valid: %d; other problems: %d",
		r.holders.inProc, r.holders.children, poolPermits, r.acquisitions, r.acquisitionsByPermit, r.afterFaults,
		r.failedAcquires, r.ops, r.refused, strings.Join(checks, ", "), r.lost, r.lostAcked, len(r.overlaps),
		r.mostValid, r.lostHolds, r.doneButValid, len(r.problems))
}

// checkPermits runs the permits workload's checks.
func checkPermits(name string, p *pool, acqs []acquisition, healed int64) *permitsResult {
	res := &permitsResult{acquisitions: len(acqs), acquisitionsByPermit: make([]int, len(p.regs))}
	for i, r := range p.regs {
		record := r.record()
		ops, problems := resolve(r.hist.snapshot(), record)
		res.problems = append(res.problems, problems...)
		res.ops += len(ops)
		for _, o := range ops {
			if o.out.status == statusStale {
				res.refused++
			}
		}
		c, viz := linearizable(fmt.Sprintf("%s-permit%d", name, i), fencedRegister(true), ops)
		res.checks = append(res.checks, c)
		if viz != "" {
			res.viz = append(res.viz, viz)
		}
		lost, acked := lostUpdates(record, ops)
		res.lost += lost
		res.lostAcked += acked
	}
	for _, a := range acqs {
		res.doneButValid += a.doneButValid
		if a.returned > healed {
			res.afterFaults++
		}
		if a.permit >= 0 && a.permit < len(res.acquisitionsByPermit) {
			res.acquisitionsByPermit[a.permit]++
		}
	}
	res.overlaps = permitOverlaps(acqs, len(p.regs))
	res.mostValid = mostSurelyValid(acqs)
	res.lostHolds, _ = closestCall(acqs)
	res.problems = append(res.problems, revokedTooLong(acqs, ttl)...)
	res.problems = append(res.problems, permitTokenProblems(acqs, len(p.regs))...)
	res.problems = append(res.problems, uncalled(acqs)...)
	if res.afterFaults == 0 {
		res.problems = append(res.problems, "permits: no acquisition after the faults ended")
	}
	return res
}

// permitOverlaps applies the strict mutex model to each permit on its own:
// a permit is a mutex, and its tokens order its holders.
func permitOverlaps(acqs []acquisition, n int) []overlap {
	var out []overlap
	for p := range n {
		out = append(out, overlaps(slices.DeleteFunc(slices.Clone(acqs), func(a acquisition) bool { return a.permit != p }))...)
	}
	return out
}

// mostSurelyValid returns the largest number of guards that were surely
// valid at one instant. A probed guard was valid from no later than its
// Acquire's return until no earlier than its last successful check, so
// guards whose [returned, believed] intervals overlap were valid together.
// A guard whose lease was revoked is left out: its permit was taken from
// it at once, before it could know (see revokedTooLong).
func mostSurelyValid(acqs []acquisition) int {
	type event struct {
		at    int64
		delta int
	}
	var evs []event
	for _, a := range acqs {
		if a.probed && a.revoked == 0 && a.believed > a.returned {
			evs = append(evs, event{a.returned, +1}, event{a.believed, -1})
		}
	}
	// Ends before starts at the same instant: only a true overlap counts.
	slices.SortFunc(evs, func(x, y event) int {
		return cmp.Or(cmp.Compare(x.at, y.at), cmp.Compare(x.delta, y.delta))
	})
	most, cur := 0, 0
	for _, e := range evs {
		cur += e.delta
		most = max(most, cur)
	}
	return most
}

// permitTokenProblems checks the permits' numbering and tokens: every
// permit in 0..n-1; no token handed out twice on the key; and for each
// permit, a guard issued surely after another (its Acquire was called
// after the other's had returned) has the higher token.
func permitTokenProblems(acqs []acquisition, n int) []string {
	var out []string
	noStamps := make([]acquisition, 0, len(acqs))
	for _, a := range acqs {
		if a.permit < 0 || a.permit >= n {
			out = append(out, fmt.Sprintf("holder %d got permit %d of %d (token %d)", a.holder, a.permit, n, a.token))
		}
		a.hasStamp = false // stamps order a key's exclusive holders; permits hold together
		noStamps = append(noStamps, a)
	}
	out = append(out, tokenAndStampProblems(noStamps)...)
	for p := range n {
		var of []acquisition
		for _, a := range acqs {
			if a.permit == p {
				of = append(of, a)
			}
		}
		out = append(out, issueOrderProblems(of, fmt.Sprintf("permit %d", p))...)
	}
	return out
}

// uncalled reports the acquisitions that have no call time: every holder
// of the permits and transfer workloads records one, so a missing one
// would leave the issue-order check nothing to judge.
func uncalled(acqs []acquisition) []string {
	var out []string
	for _, a := range acqs {
		if a.called == 0 {
			out = append(out, fmt.Sprintf("holder %d's acquisition (token %d) has no call time", a.holder, a.token))
		}
	}
	return out
}

// issueOrderProblems checks, among acquisitions of one permit (or one
// key), that whenever b's Acquire was called after a's had returned, b's
// token is the higher. Acquisitions whose call time is unknown are only
// ever the earlier one.
func issueOrderProblems(acqs []acquisition, what string) []string {
	byReturn := slices.Clone(acqs)
	slices.SortFunc(byReturn, func(a, b acquisition) int { return cmp.Compare(a.returned, b.returned) })
	// highest[i]: the acquisition with the highest token among byReturn[:i+1].
	highest := make([]int, len(byReturn))
	for i := range byReturn {
		highest[i] = i
		if i > 0 && byReturn[highest[i-1]].token > byReturn[i].token {
			highest[i] = highest[i-1]
		}
	}
	var out []string
	for _, b := range acqs {
		if b.called == 0 {
			continue
		}
		// Acquisitions that returned before b was called.
		i, _ := slices.BinarySearchFunc(byReturn, b.called, func(a acquisition, t int64) int {
			if a.returned < t {
				return -1
			}
			return 1
		})
		if i == 0 {
			continue
		}
		if a := byReturn[highest[i-1]]; a.token >= b.token {
			out = append(out, fmt.Sprintf("%s: holder %d got token %d after holder %d's token %d had been issued",
				what, b.holder, b.token, a.holder, a.token))
		}
	}
	return out
}
