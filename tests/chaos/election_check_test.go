package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// electionResult is what the election workload's checks found.
type electionResult struct {
	candidates   int
	terms        int // calls of lead (terms that began leading)
	afterFaults  int // of them, after the faults ended
	ops, refused int // register operations; refused by the fence
	writes       int // writes the register applied
	check        porcupine.CheckResult
	viz          string
	lost, acked  int // lost updates; of them acknowledged
	// Terms whose writes the register admitted, in the order of their
	// first write; how many wrote while faults were injected and after.
	wrote                   []uint64
	wroteDuring, wroteAfter int
	// The observer: states yielded, distinct terms among them, terms that
	// wrote before the observer had yielded them and the longest such
	// lead of a first write over its term's yield.
	observed, observedTerms int
	writeFirst              int
	writeLead               time.Duration
	// Late writes (the negative control): made after lead's context had
	// ended, and admitted by the register.
	late, lateAdmitted int64
	// The leaders' belief, probed through lead's context: terms with a
	// successful probe; terms still believed after a later term's lead
	// had begun (revoked terms left out); terms whose context ended while
	// lead ran, and the closest call among them (see closestCall; -1 if
	// none).
	probedTerms int
	twoLeaders  []overlap
	lostTerms   int
	closest     time.Duration
	// Late beliefs (the negative control of the probes): probes that
	// reported belief after lead's context had ended.
	lateBeliefs int64

	outOfOrder []string // a write by an older term after a newer term's
	backwards  []string // Observe yielded a term below one it had yielded, or one that had ended
	missed     []string // a term that wrote and was not observed, or out of order
	// missedInGap are terms not observed that began and ended inside a
	// gap of the observer's listener (see listenerGap): allowed.
	missedInGap []string
	wrongOwner  []string // Observe named the wrong owner or value for a term
	problems    []string // tokens, liveness, the observer's own trouble
}

func (r *electionResult) violations() int {
	n := r.lost + len(r.outOfOrder) + len(r.twoLeaders) + len(r.backwards) + len(r.missed) + len(r.wrongOwner) + len(r.problems)
	if r.check != porcupine.Ok {
		n++
	}
	return n
}

func (r *electionResult) String() string {
	return fmt.Sprintf("election (%d candidate processes): %d terms led (%d after the faults), %d of them wrote (%d during the faults, %d after); "+
		"register: %d ops (%d refused by the fence), %d writes applied, %s, %d lost updates (%d acknowledged); "+
		"late writes %d (%d admitted); writes out of term order: %d; "+
		"leaders' belief: %d terms probed, %d believed after a later term's lead began (terms lost while leading: %d, closest call %v), late beliefs %d; "+
		"observer: %d states, %d terms (%d terms wrote before they were observed, by up to %v); "+
		"backwards: %d; missed: %d (and %d inside a gap of the observer's listener); wrong owner: %d; other problems: %d",
		r.candidates, r.terms, r.afterFaults, len(r.wrote), r.wroteDuring, r.wroteAfter,
		r.ops, r.refused, r.writes, r.check, r.lost, r.acked,
		r.late, r.lateAdmitted, len(r.outOfOrder),
		r.probedTerms, len(r.twoLeaders), r.lostTerms, r.closest, r.lateBeliefs,
		r.observed, r.observedTerms, r.writeFirst, r.writeLead,
		len(r.backwards), len(r.missed), len(r.missedInGap), len(r.wrongOwner), len(r.problems))
}

// listenerGap is a time, on the run's clock, when an observer on
// PostgreSQL or Redis may have had no listener (or subscriber) connection:
// the notifications sent then are lost, and when it is back the observer
// reads the state once, so a term that began and ended meanwhile is never
// yielded - as DESIGN allows of a change inside etcd's compacted gap. Gaps
// come from the faults (estimated: until the fault's end and a grace) and
// from the observer's Backend (what it reported: from the loss of its
// listener to its read of the state once back); gaps that overlap are one.
type listenerGap struct{ from, to int64 }

// mergeGaps returns gaps with those that overlap joined, in order.
func mergeGaps(gaps []listenerGap) []listenerGap {
	gaps = slices.Clone(gaps)
	slices.SortFunc(gaps, func(a, b listenerGap) int { return cmp.Compare(a.from, b.from) })
	var out []listenerGap
	for _, g := range gaps {
		if n := len(out); n > 0 && g.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, g.to)
			continue
		}
		out = append(out, g)
	}
	return out
}

// excuseGaps moves each term that Observe never yielded, and whose lead
// was called and last believed inside one of gaps (merged), from missed
// to missedInGap.
func (r *electionResult) excuseGaps(acqs []acquisition, gaps []listenerGap) {
	gaps = mergeGaps(gaps)
	var kept []string
	for _, m := range r.missed {
		if _, ok := neverYieldedInside(m, acqs, gaps); ok {
			r.missedInGap = append(r.missedInGap, m)
		} else {
			kept = append(kept, m)
		}
	}
	r.missed = kept
}

// markHeld adds to each term still missed that was led and last believed
// while the observer's route held its bytes (one of held: a blackhole or
// delay aimed at the observer) when that was. The events of such a term
// reached the observer late, together with the next ones: a term missed
// then was merged with them by Observe, not lost with a connection. It
// stays a violation.
func (r *electionResult) markHeld(acqs []acquisition, held []listenerGap) {
	for i, m := range r.missed {
		if g, ok := neverYieldedInside(m, acqs, held); ok {
			r.missed[i] += fmt.Sprintf("; the observer's connections were held (blackholed or delayed) from %.2fs to %.2fs, "+
				"and the events sent meanwhile reached it together when they were released",
				time.Duration(g.from).Seconds(), time.Duration(g.to).Seconds())
		}
	}
}

// neverYieldedInside reports whether m says a term was never yielded
// whose lead was called and last believed inside one of gaps, and which.
func neverYieldedInside(m string, acqs []acquisition, gaps []listenerGap) (listenerGap, bool) {
	for _, a := range acqs {
		if !strings.HasPrefix(m, fmt.Sprintf("term %d led, but Observe never yielded it", a.token)) {
			continue
		}
		for _, g := range gaps {
			if a.returned >= g.from && max(a.believed, a.returned) <= g.to {
				return g, true
			}
		}
	}
	return listenerGap{}, false
}

// checkElection runs the election workload's checks: the register's
// history against the fenced-register model and for lost updates; terms
// that wrote in increasing order; the leaders' belief against the strict
// mutex model (see leaderBelief); the observer's stream never backwards,
// naming the right owners, and containing, in order, every term whose
// lead was called (written or not: the terms that end before writing are
// the ones faults cut short).
//
// The last check assumes nothing was compacted: etcd's Observe may miss
// changes inside a compacted gap (DESIGN section 9). The suite never
// compacts - no fault does, and the embedded members run without
// auto-compaction - and a compaction would make the check of the mutex
// workload's register fail too, which reads etcd's history from the run's
// first revision.
func checkElection(name string, reg *resource, acqs []acquisition, seen []observed, healed int64, ttl time.Duration) *electionResult {
	res := &electionResult{terms: len(acqs)}
	record := reg.record()
	hist := reg.hist.snapshot()
	ops, problems := resolve(hist, record)
	res.problems = append(res.problems, problems...)
	res.ops, res.writes = len(ops), len(record)
	for _, o := range ops {
		if o.out.status == statusStale {
			res.refused++
		}
	}
	res.check, res.viz = linearizable(name+"-election", fencedRegister(true), ops)
	res.lost, res.acked = lostUpdates(record, ops)

	var firstWrite map[uint64]int64
	res.wrote, firstWrite, res.outOfOrder = writtenTerms(record, hist)
	for _, t := range res.wrote {
		if firstWrite[t] <= healed {
			res.wroteDuring++
		} else {
			res.wroteAfter++
		}
	}
	if res.wroteDuring == 0 {
		res.problems = append(res.problems, "election: no term wrote while faults were injected")
	}
	if res.wroteAfter == 0 {
		res.problems = append(res.problems, "election: no term wrote after the faults ended")
	}
	for _, a := range acqs {
		if a.returned > healed {
			res.afterFaults++
		}
	}
	res.problems = append(res.problems, tokenAndStampProblems(acqs)...)
	res.leaderBelief(acqs, ttl)

	res.observed = len(seen)
	res.backwards = observedBackwards(seen)
	res.missed = missedTerms(ledTerms(acqs), seen)
	for i, m := range res.missed {
		// When the term was, on the run's clock (as the faults are logged).
		for _, a := range acqs {
			if strings.HasPrefix(m, fmt.Sprintf("term %d ", a.token)) {
				res.missed[i] += fmt.Sprintf(" (lead called at %.2fs, believed until %.2fs)",
					time.Duration(a.returned).Seconds(), time.Duration(a.believed).Seconds())
			}
		}
	}
	res.wrongOwner = wrongOwners(seen, acqs)
	yielded := make(map[uint64]int64)
	for _, s := range seen {
		if _, ok := yielded[s.token]; !ok && s.token != 0 {
			yielded[s.token] = s.at
		}
	}
	res.observedTerms = len(yielded)
	for _, t := range res.wrote {
		if at, ok := yielded[t]; ok && at > firstWrite[t] {
			res.writeFirst++
			res.writeLead = max(res.writeLead, time.Duration(at-firstWrite[t]))
		}
	}
	return res
}

// leaderBelief holds the leaders' belief to the strict mutex model, as
// the lock children's is: a term's last successful probe (lead's context
// not ended, timed by the parent before it let the child check) is a lower
// bound on the last moment its leader believed it led; a later term's
// "acq" (sent when its lead was called, timed when the parent got it) an
// upper bound on when that term began to lead. A term still believed then
// means two leaders acting at once, whether or not the old one wrote. The
// exemption is the mutex model's: a term whose lease was revoked (a fault)
// loses the key before it can know, so it is judged by revokedTooLong
// instead - it must stop believing within the TTL of the revocation. A
// check made after the context's Done had closed must fail.
func (r *electionResult) leaderBelief(acqs []acquisition, ttl time.Duration) {
	done := 0
	lost := slices.Clone(acqs) // for the closest call: revoked terms left out
	for i, a := range acqs {
		if a.probed {
			r.probedTerms++
		}
		done += a.doneButValid
		if a.revoked != 0 {
			lost[i].lost = false
		}
	}
	r.twoLeaders = overlaps(acqs)
	r.problems = append(r.problems, revokedTooLong(acqs, ttl)...)
	if done > 0 {
		r.problems = append(r.problems, fmt.Sprintf("election: %d checks found lead's context alive after its Done had closed", done))
	}
	r.lostTerms, r.closest = closestCall(lost)
}

// leaderOverlap describes an overlap of two terms.
func leaderOverlap(o overlap) string {
	return fmt.Sprintf("candidate %d (term %d) still believed it led %v after candidate %d's term %d began leading",
		o.earlier.holder, o.earlier.token, o.by, o.later.holder, o.later.token)
}

// writtenTerms returns the terms whose writes the register applied, in
// the order of the register's record, with when each first returned from
// an applied write; and every applied write by a term older than one that
// had written before it. (Consecutive writes of one term are one entry.)
func writtenTerms(record []applied, hist []op) (terms []uint64, first map[uint64]int64, outOfOrder []string) {
	byTag := make(map[string]op, len(hist))
	for _, o := range hist {
		if o.in.kind == opWrite {
			byTag[o.in.tag] = o
		}
	}
	first = make(map[uint64]int64)
	var newest uint64
	for _, a := range record {
		o := byTag[a.tag]
		t := o.in.token
		if t < newest {
			outOfOrder = append(outOfOrder, fmt.Sprintf("write %s by term %d applied after term %d had written", a.tag, t, newest))
			continue
		}
		if t > newest {
			terms = append(terms, t)
			first[t] = o.ret
			newest = t
		}
	}
	return terms, first, outOfOrder
}

// observedBackwards checks the observer's stream: no term below the
// highest yielded so far, and no term yielded again once another state
// (another term, or nobody) had followed it - a term that has ended never
// comes back.
func observedBackwards(seen []observed) []string {
	var out []string
	ended := make(map[uint64]bool)
	var highest, prev uint64
	for i, s := range seen {
		if i > 0 && prev != 0 && s.token != prev {
			ended[prev] = true
		}
		switch {
		case s.token == 0:
		case s.token < highest:
			out = append(out, fmt.Sprintf("Observe yielded term %d after term %d (state %d)", s.token, highest, i))
		case ended[s.token]:
			out = append(out, fmt.Sprintf("Observe yielded term %d again after it had ended (state %d)", s.token, i))
		}
		highest, prev = max(highest, s.token), s.token
	}
	return out
}

// missedTerms checks that every term that wrote appears among the terms
// Observe yielded, in the same order.
func missedTerms(led []uint64, seen []observed) []string {
	var tokens []uint64
	for _, s := range seen {
		if s.token != 0 && (len(tokens) == 0 || tokens[len(tokens)-1] != s.token) {
			tokens = append(tokens, s.token)
		}
	}
	var out []string
	i := 0
	for _, t := range led {
		if k := slices.Index(tokens[i:], t); k >= 0 {
			i += k + 1
			continue
		}
		if slices.Contains(tokens, t) {
			out = append(out, fmt.Sprintf("term %d led, but Observe yielded it out of order", t))
		} else {
			out = append(out, fmt.Sprintf("term %d led, but Observe never yielded it", t))
		}
	}
	return out
}

// ledTerms returns the terms whose lead was called, in increasing order.
func ledTerms(acqs []acquisition) []uint64 {
	out := make([]uint64, 0, len(acqs))
	for _, a := range acqs {
		out = append(out, a.token)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// wrongOwners checks that each term Observe yielded carries the owner
// label and value of the candidate that led it, where its lead was called;
// a term yielded without a lead call (its candidate's Campaign failed
// after its claim came first) must still carry the label and value of one
// candidate.
func wrongOwners(seen []observed, acqs []acquisition) []string {
	who := make(map[uint64]int, len(acqs))
	for _, a := range acqs {
		who[a.token] = a.holder
	}
	var out []string
	for _, s := range seen {
		if s.token == 0 {
			continue
		}
		id, ok := who[s.token]
		if !ok {
			n, isChild := strings.CutPrefix(s.owner, childOwner)
			if c, err := strconv.Atoi(n); !isChild || err != nil || s.value != candidateValue(c) {
				out = append(out, fmt.Sprintf("Observe named term %d %q with value %q, which no candidate is", s.token, s.owner, s.value))
			}
			continue
		}
		wantOwner, wantValue := fmt.Sprintf("%s%d", childOwner, id), candidateValue(id)
		if s.owner != wantOwner || s.value != wantValue {
			out = append(out, fmt.Sprintf("Observe named term %d %q with value %q; candidate %d led it (%q, %q)",
				s.token, s.owner, s.value, id, wantOwner, wantValue))
		}
	}
	return out
}

// requireElectionClean fails t with every violation the election
// workload's checks found.
func requireElectionClean(t interface {
	Helper()
	Errorf(string, ...any)
}, e *electionResult) {
	t.Helper()
	if e.check != porcupine.Ok {
		t.Errorf("election register history: %s (visualization: %s)", e.check, e.viz)
	}
	if e.lost != 0 {
		t.Errorf("election register: %d lost updates (%d acknowledged)", e.lost, e.acked)
	}
	for i, o := range e.twoLeaders {
		if i == 10 {
			t.Errorf("... and %d more terms believed after a later term's lead began", len(e.twoLeaders)-10)
			break
		}
		t.Errorf("election, strict mutex model: %s", leaderOverlap(o))
	}
	for _, group := range [][]string{e.outOfOrder, e.backwards, e.missed, e.wrongOwner, e.problems} {
		for i, s := range group {
			if i == 10 {
				t.Errorf("... and %d more like it", len(group)-10)
				break
			}
			t.Errorf("election: %s", strings.TrimPrefix(s, "election: "))
		}
	}
}
