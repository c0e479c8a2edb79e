package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// The strict mutex model: no holder may still believe it holds the lock
// after a later acquisition has returned.
//
// "Believes" is observed, not inferred. A holder in this process checks its
// lock (FencingToken; for the control, the etcd session's Done) every few
// milliseconds and before each step, reading the clock before each check;
// the latest check that succeeded gives a lower bound on the last moment it
// believed (acquisition.believed). A later acquisition's return time is an
// upper bound (read after Acquire returned; for a child, when the parent
// got its message). So believed > returned means the first holder surely
// believed it held the lock after the second one's Acquire had returned -
// a violation that clock reading delays cannot fake. "Later" is by token:
// tokens order acquisitions of one key.
//
// Children's checks are timed on the run's clock too: the parent takes the
// time before it lets a child check its guard. A guard whose lease an
// administrator revoked (a fault) is not held to the model, since the key
// is taken from it at once and it can only learn of that afterwards;
// instead it must stop believing within the TTL of the revocation, when
// its local deadline has surely passed (revokedTooLong). Every holder's
// acquisitions count as the later one.
//
// Election terms are held to the same model (leaderBelief): a term's
// leader believes while lead's context has not ended, probed by the child
// as its guard would be, and a term begins when the parent hears that its
// lead was called.

// overlap is one violation of the strict mutex model.
type overlap struct {
	earlier, later acquisition
	by             time.Duration // how long the earlier one went on believing
}

func (o overlap) String() string {
	return fmt.Sprintf("holder %d (token %d) still believed %v after holder %d's acquisition (token %d) returned",
		o.earlier.holder, o.earlier.token, o.by, o.later.holder, o.later.token)
}

// overlaps returns every acquisition whose believing outlasted the return
// of some later acquisition, paired with the earliest such later one.
func overlaps(acqs []acquisition) []overlap {
	byToken := slices.Clone(acqs)
	slices.SortFunc(byToken, func(a, b acquisition) int { return cmp.Compare(a.token, b.token) })
	// firstReturn[i]: the later acquisition (index > i) that returned
	// first.
	firstReturn := make([]int, len(byToken))
	best := -1
	for i := len(byToken) - 1; i >= 0; i-- {
		firstReturn[i] = best
		if best < 0 || byToken[i].returned < byToken[best].returned {
			best = i
		}
	}
	var out []overlap
	for i, a := range byToken {
		j := firstReturn[i]
		if !a.probed || a.revoked != 0 || j < 0 || a.believed <= byToken[j].returned {
			continue
		}
		out = append(out, overlap{earlier: a, later: byToken[j], by: time.Duration(a.believed - byToken[j].returned)})
	}
	return out
}

// revokedTooLong reports every guard whose lease was revoked and that was
// still believed more than the TTL after the revocation returned: no
// renewal can be acknowledged after a revocation, so by then the guard's
// local deadline (the last acknowledged renewal's send time plus the TTL,
// less a margin) had surely passed.
func revokedTooLong(acqs []acquisition, ttl time.Duration) []string {
	var out []string
	for _, a := range acqs {
		if a.probed && a.revoked != 0 && a.believed > a.revoked+int64(ttl) {
			out = append(out, fmt.Sprintf("holder %d (token %d) still believed %v after its lease was revoked, more than the TTL %v",
				a.holder, a.token, time.Duration(a.believed-a.revoked), ttl))
		}
	}
	return out
}

// closestCall returns, over the holders in this process that lost their
// lock while holding it (poisoned by the watchdog or by its claim's watch, or -
// in the control - a session that ended), or over the election terms
// whose context ended while lead ran, how many there were and the
// smallest margin by which one stopped believing before the next
// acquisition returned: how close the run came to an overlap.
func closestCall(acqs []acquisition) (lost int, closest time.Duration) {
	byToken := slices.Clone(acqs)
	slices.SortFunc(byToken, func(a, b acquisition) int { return cmp.Compare(a.token, b.token) })
	closest = -1
	first := int64(-1) // earliest return among later acquisitions
	for i := len(byToken) - 1; i >= 0; i-- {
		a := byToken[i]
		if a.probed && a.lost {
			lost++
			if first >= 0 && a.believed > 0 {
				if gap := time.Duration(first - a.believed); closest < 0 || gap < closest {
					closest = gap
				}
			}
		}
		if first < 0 || a.returned < first {
			first = a.returned
		}
	}
	return lost, closest
}

// tokenAndStampProblems checks guarantees 2 and 10 over a run's
// acquisitions: tokens are never reused, and in token order each stamp is
// greater than the one before.
func tokenAndStampProblems(acqs []acquisition) []string {
	byToken := slices.Clone(acqs)
	slices.SortFunc(byToken, func(a, b acquisition) int { return cmp.Compare(a.token, b.token) })
	var out []string
	var prev *acquisition
	for i := range byToken {
		a := &byToken[i]
		if i > 0 && byToken[i-1].token == a.token {
			out = append(out, fmt.Sprintf("token %d handed out twice (holders %d and %d)", a.token, byToken[i-1].holder, a.holder))
		}
		if !a.hasStamp {
			continue
		}
		if prev != nil && (a.stampW < prev.stampW || (a.stampW == prev.stampW && a.stampL <= prev.stampL)) {
			out = append(out, fmt.Sprintf("stamp %d.%d of token %d is not above stamp %d.%d of token %d",
				a.stampW, a.stampL, a.token, prev.stampW, prev.stampL, prev.token))
		}
		prev = a
	}
	return out
}
