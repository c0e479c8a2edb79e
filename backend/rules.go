package backend

import "math/bits"

// Kind is what a claim asks of its key's queue: exclusive (Permits 1, not
// Shared), shared (Shared), or counted (Permits n > 1).
type Kind struct {
	Shared  bool
	Permits int // n, at least 1
}

// KindOf returns the kind of req, with Permits 0 read as 1.
func KindOf(req *AcquireRequest) Kind {
	return Kind{Shared: req.Shared, Permits: max(req.Permits, 1)}
}

// Kind returns the kind of c, with Permits 0 read as 1.
func (c *Claim) Kind() Kind { return Kind{Shared: c.Shared, Permits: max(c.Permits, 1)} }

// Counted reports whether k admits more than one holder that is not shared.
func (k Kind) Counted() bool { return k.Permits > 1 }

// Exclusive reports whether k is a plain lock: one holder, not shared.
func (k Kind) Exclusive() bool { return !k.Shared && k.Permits == 1 }

// Admits is the queue rule, the one statement of when a claim is free at a
// key. The claims ahead of the claim in the key's queue (lower tokens) are
// ahead in all, nonShared of them not shared, and unlike says whether any
// of them is of another kind than k; the rule is asked only when every
// claim ahead is itself free, since a claim blocked by something ahead
// blocks everything behind it. A claim of kind k is free when:
//
//   - exclusive: no claim is ahead;
//   - shared: no claim that is not shared is ahead, so a run of readers
//     holds together and a writer queued among them keeps the readers
//     behind it waiting;
//   - counted (n permits): fewer than n claims are ahead, all counted
//     with n.
//
// The claims of a queue agree on n, but a store that checks the count only
// against the claim just ahead can briefly queue one that does not; a
// claim of another kind ahead then blocks a counted claim as an exclusive
// one would, so that such a queue never has more holders than any of its
// claims allows. A store whose queues always agree passes unlike false.
//
// Each condition only gets easier as claims ahead leave, and claims join
// only at the back, so a free claim stays free and the free claims of a
// queue are a prefix of it. A claim holds once it is free at every one of
// its keys; one token orders two claims the same way at every key they
// share, so a claim waits only for claims with smaller tokens and no cycle
// of waits can form.
func Admits(k Kind, ahead, nonShared int, unlike bool) bool {
	switch {
	case k.Permits > 1:
		return ahead < k.Permits && !unlike
	case k.Shared:
		return nonShared == 0
	default:
		return ahead == 0
	}
}

// FreePrefix returns how many claims at the head of q, the kinds of a
// key's queue in token order, the rule admits (see Admits).
func FreePrefix(q []Kind) int {
	var s scan
	for i, k := range q {
		if !s.next(k) {
			return i
		}
	}
	return len(q)
}

// scan walks a queue in token order while every claim so far is free,
// keeping what Admits asks about the claims ahead of the next one.
type scan struct {
	head      Kind // the kind of the queue's first claim
	ahead     int  // claims seen
	nonShared int  // claims seen that are not shared
	same      int  // claims at the head of the queue of head's kind
}

// next reports whether the rule admits k, the claim after those seen, and
// counts it as seen.
func (s *scan) next(k Kind) bool {
	if s.ahead == 0 {
		s.head = k
	}
	// A claim ahead differs from k when the first one does, or, when k is
	// of the first one's kind, when the run of that kind ends before k.
	unlike := s.ahead > 0 && (k != s.head || s.same < s.ahead)
	free := Admits(k, s.ahead, s.nonShared, unlike)
	if s.same == s.ahead && k == s.head {
		s.same++
	}
	s.ahead++
	if !k.Shared {
		s.nonShared++
	}
	return free
}

// Wait is what a claim that the rule does not admit waits for: the
// departure of any one of the claims q[From..To] (indexes into the queue,
// inclusive) or, when Admission is set, the admission of q[To] as well
// (the store recording that it took its permit). Nothing else can free
// the claim, so a store that wakes a waiter only on these events wakes
// only waiters whose standing may have changed; the waiter then reads its
// queue again and either holds or waits anew.
type Wait struct {
	From, To  int
	Admission bool
}

// WaitFor returns what q[i] waits for; i must be at or past FreePrefix(q).
// Each kind waits for one claim, so a release wakes one waiter (or, after
// a writer, the readers up to the next writer), except the first waiter of
// a counted key, which any one of the n holders can admit:
//
//   - exclusive: the claim just ahead;
//   - shared: the newest claim ahead that is not shared;
//   - counted, n claims ahead: any of them;
//   - counted, more than n ahead: the claim just ahead, leaving or being
//     admitted (its admission means one of the n holders left, and the
//     claim is then first in line).
//
// A counted claim with a claim of another kind ahead (see Admits) waits for
// the newest such claim to leave, as a shared one waits for the newest
// claim ahead that is not shared: it cannot be free while that claim is
// queued, and once it has left the claim reads its queue again.
func WaitFor(q []Kind, i int) Wait {
	k := q[i]
	switch {
	case k.Permits > 1:
		for j := i - 1; j >= 0; j-- {
			if q[j] != k {
				return Wait{From: j, To: j}
			}
		}
		if i == k.Permits {
			return Wait{From: 0, To: i - 1}
		}
		return Wait{From: i - 1, To: i - 1, Admission: true}
	case k.Shared:
		for j := i - 1; j >= 0; j-- {
			if !q[j].Shared {
				return Wait{From: j, To: j}
			}
		}
	}
	return Wait{From: i - 1, To: i - 1}
}

// NoPermit is the permit of a counted claim that has not taken one yet.
const NoPermit = -1

// PermitFor returns the permit that q[i], a counted claim the rule admits,
// takes: the lowest one that no claim ahead of it holds, given permits,
// the permit each claim of q has recorded (NoPermit if none). Holders take
// their permits in token order, so every token issued for a permit is
// greater than the earlier tokens of that permit: while a claim ahead has
// not recorded its own, PermitFor returns NoPermit and that claim's index,
// whose admission q[i] must wait for; otherwise it returns the permit and
// -1.
func PermitFor(permits []int, n, i int) (permit, waitFor int) {
	var used PermitSet
	for j, p := range permits[:i] {
		if p == NoPermit {
			return NoPermit, j
		}
		used.Set(p)
	}
	return used.Lowest(n), -1
}

// PermitSet is a set of permit numbers, 0..MaxPermits-1. The zero value is
// empty.
type PermitSet [MaxPermits / 64]uint64

// Set adds p to the set.
func (s *PermitSet) Set(p int) { s[p/64] |= 1 << (p % 64) }

// Clear removes p from the set.
func (s *PermitSet) Clear(p int) { s[p/64] &^= 1 << (p % 64) }

// Lowest returns the lowest permit below n not in the set, or NoPermit if
// all n are.
func (s *PermitSet) Lowest(n int) int {
	for i, w := range s[:(n+63)/64] {
		if w != ^uint64(0) {
			if p := i*64 + bits.TrailingZeros64(^w); p < n {
				return p
			}
			break
		}
	}
	return NoPermit
}

// HoldsAlone reports whether a claim of kind k that holds a key had no
// older claim left there when it came to hold: the rule admits it with
// nothing ahead only (an exclusive claim). A store that learns such a
// claim held knows every older claim at the key gone by then.
func HoldsAlone(k Kind) bool { return !Admits(k, 1, 0, false) }

// Ahead returns how many of the claims just ahead of a new claim of kind k
// (joining at the back of a key's queue) the rule reads to place it, or 0
// for all of them. Given only q[i-n:i+1], where i is the new claim's index
// and n = Ahead(k), FreePrefix and WaitFor answer for it as they do given
// the whole queue (with indexes shifted by i-n), so a store may list only
// those claims to a claim that joins. An exclusive claim is free only with
// nothing ahead, and waits only for the claim just ahead; a shared or
// counted claim may wait for a claim at any distance.
func Ahead(k Kind) int {
	if k.Exclusive() {
		return 1
	}
	return 0
}
