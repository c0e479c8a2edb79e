package chaos

import (
	"fmt"
	"slices"

	"github.com/anishathalye/porcupine"
)

// transferResult is what the transfer workload's checks found.
type transferResult struct {
	holders        group
	accounts       int
	acquisitions   int
	afterFaults    int
	failedAcquires int64
	ops            int // requests to the bank
	// Applied transfers, in all, while faults were injected and after.
	applied, appliedDuring, appliedAfter int
	refused                              int // requests the fences refused
	total, finalTotal                    int64
	broken                               []string // applied writes that changed the total
	check                                porcupine.CheckResult
	viz                                  []string
	overlaps                             []overlap // per account, strict mutex model
	lostHolds                            int
	doneButValid                         int
	problems                             []string
}

func (r *transferResult) violations() int {
	n := len(r.broken) + len(r.overlaps) + r.doneButValid + len(r.problems)
	if r.finalTotal != r.total {
		n++
	}
	if r.check != porcupine.Ok {
		n++
	}
	return n
}

func (r *transferResult) String() string {
	return fmt.Sprintf("transfer (%d in-process, %d child holders, %d accounts): %d acquisitions (%d after the faults), "+
		"%d failed acquires; bank: %d requests, %d transfers applied (%d during the faults, %d after), %d requests refused by the fences; "+
		"total %d, want %d, %d writes changed it; accounts %s; per-account overlaps: %d (in-process holds lost: %d); "+
		"Done-but-valid: %d; other problems: %d",
		r.holders.inProc, r.holders.children, r.accounts, r.acquisitions, r.afterFaults, r.failedAcquires,
		r.ops, r.applied, r.appliedDuring, r.appliedAfter, r.refused,
		r.finalTotal, r.total, len(r.broken), r.check, len(r.overlaps), r.lostHolds, r.doneButValid, len(r.problems))
}

// checkTransfer runs the transfer workload's checks.
func checkTransfer(name string, b *bank, acqs []acquisition, healed int64) *transferResult {
	b.mu.Lock()
	hist := slices.Clone(b.hist)
	appliedAt := slices.Clone(b.appliedAt)
	res := &transferResult{accounts: len(b.keys), total: b.total, finalTotal: b.sum(), broken: slices.Clone(b.broken)}
	b.mu.Unlock()

	res.ops = len(hist)
	for _, o := range hist {
		if !o.ok {
			res.refused++
		}
	}
	// Progress: transfers were completed while the faults went on and
	// after they stopped. Every Acquire is bounded by acquireTimeout, so a
	// deadlock shows as transfers that stop; a run also fails if a holder
	// does not stop when asked.
	res.applied = len(appliedAt)
	for _, at := range appliedAt {
		if at <= healed {
			res.appliedDuring++
		} else {
			res.appliedAfter++
		}
	}
	if res.appliedDuring == 0 {
		res.problems = append(res.problems, "transfer: no transfer completed while faults were injected")
	}
	if res.appliedAfter == 0 {
		res.problems = append(res.problems, "transfer: no transfer completed after the faults ended")
	}

	// Each account on its own is a fenced register: check its projection
	// of the history. A request refused because of another of its
	// accounts is refused here too, so refusals are not judged (as for
	// the register in etcd); what is judged is that an admitted request
	// never carries a token below one already admitted, and reads see the
	// last write.
	res.check = porcupine.Ok
	for _, k := range b.keys {
		c, viz := linearizable(fmt.Sprintf("%s-account%s", name, k[len(accountPrefix):]), fencedRegisterFrom(openingBalance, false), accountOps(hist, k))
		if c != porcupine.Ok && res.check != porcupine.Illegal {
			res.check = c
		}
		if viz != "" {
			res.viz = append(res.viz, viz)
		}
	}

	res.acquisitions = len(acqs)
	for _, a := range acqs {
		res.doneButValid += a.doneButValid
		if a.returned > healed {
			res.afterFaults++
		}
	}
	res.overlaps = accountOverlaps(acqs, b.keys)
	res.lostHolds, _ = closestCall(acqs)
	res.problems = append(res.problems, revokedTooLong(acqs, ttl)...)
	res.problems = append(res.problems, accountTokenProblems(acqs, b.keys)...)
	res.problems = append(res.problems, uncalled(acqs)...)
	return res
}

// accountOps projects the bank's history on account k: each request that
// names k becomes a read or write of k's register, with the request's
// token, times and outcome.
func accountOps(hist []xferOp, k string) []op {
	var out []op
	for _, x := range hist {
		i := slices.Index(x.keys, k)
		if i < 0 {
			continue
		}
		o := op{holder: x.holder, in: regInput{kind: opRead, token: x.token}, out: regOutput{status: statusStale}, call: x.call, ret: x.ret}
		if x.write {
			o.in = regInput{kind: opWrite, token: x.token, value: x.values[i], tag: x.tag}
		}
		if x.ok {
			o.out.status = statusOK
			if !x.write {
				o.out.value = x.values[i]
			}
		}
		out = append(out, o)
	}
	return out
}

// accountOverlaps applies the strict mutex model to each account: a
// LockAll guard holds each of its keys as a mutex, and its one token
// orders it at each. An overlap found at several accounts is reported
// once.
func accountOverlaps(acqs []acquisition, keys []string) []overlap {
	type pair struct{ a, b uint64 }
	seen := make(map[pair]bool)
	var out []overlap
	for _, k := range keys {
		for _, o := range overlaps(holding(acqs, k)) {
			if p := (pair{o.earlier.token, o.later.token}); !seen[p] {
				seen[p] = true
				out = append(out, o)
			}
		}
	}
	return out
}

// accountTokenProblems checks, per account, that no token was handed out
// twice and that a guard issued surely after another has the higher token.
func accountTokenProblems(acqs []acquisition, keys []string) []string {
	var out []string
	for _, k := range keys {
		of := holding(acqs, k)
		for i := range of {
			of[i].hasStamp = false // stamps are checked on the mutex workload
		}
		out = append(out, tokenAndStampProblems(of)...)
		out = append(out, issueOrderProblems(of, k)...)
	}
	return out
}

// holding returns the acquisitions whose guard held key k.
func holding(acqs []acquisition, k string) []acquisition {
	var out []acquisition
	for _, a := range acqs {
		if slices.Contains(a.keys, k) {
			out = append(out, a)
		}
	}
	return out
}
