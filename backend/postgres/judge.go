package postgres

import (
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// standing is what the queue rule says of a claim, given its keys' queues.
type standing struct {
	gone     bool // the claim has no row at some key
	admitted bool // every row records its admission already
	holds    bool // the rule admits it at every key, and it may take permit
	permit   int
	// acquiredAt is when an admitted claim came to hold its keys.
	acquiredAt time.Time
	// want names the claims whose events (delete, and for some
	// admission) can change the standing; blockers are those among them
	// whose lease's expiry would too.
	want     waitSet
	blockers []queued
}

// judge applies the rules of package backend to rows, the queues of the
// acquisition's keys in token order. With virtual it judges a claim made
// now, at the back of every queue (a request that does not queue);
// otherwise the acquisition's own claim, by its token.
func (a *acquisition) judge(rows []queued, virtual bool) standing {
	s := standing{holds: true, admitted: !virtual, want: make(waitSet)}
	if !virtual {
		for _, k := range a.keys {
			s.want[ref{key: k, token: a.token}] = false // our own loss ends the wait
		}
	}
	for _, key := range a.keys {
		var q []queued
		for _, r := range rows {
			if r.key == key {
				q = append(q, r)
			}
		}
		kinds := make([]backend.Kind, len(q), len(q)+1)
		for j, r := range q {
			kinds[j] = r.kind
		}
		i := len(q)
		if virtual {
			kinds = append(kinds, a.kind)
		} else {
			i = -1
			for j, r := range q {
				if r.token == a.token && r.name == a.req.ID {
					i = j
					break
				}
			}
			if i < 0 {
				return standing{gone: true}
			}
			s.admitted = s.admitted && q[i].admitted
			if q[i].admitted {
				s.permit = max(q[i].permit, 0)
				if q[i].acquiredAt != nil {
					s.acquiredAt = *q[i].acquiredAt
				}
			}
		}
		if i < backend.FreePrefix(kinds) {
			if a.kind.Counted() && (virtual || !q[i].admitted) {
				s.permitAt(q, i, a.kind.Permits)
			}
			continue
		}
		s.holds = false
		w := backend.WaitFor(kinds, i)
		for j, r := range q[w.From : w.To+1] {
			s.wait(r, w.Admission && w.From+j == w.To)
		}
	}
	return s
}

// permitAt picks the permit of a counted claim at index i of q, which the
// rule admits (see backend.PermitFor); if an older claim has not recorded
// its own yet, the claim waits for it.
func (s *standing) permitAt(q []queued, i, n int) {
	permits := make([]int, i)
	for j, r := range q[:i] {
		permits[j] = r.permit
		if !r.admitted {
			permits[j] = backend.NoPermit
		}
	}
	p, older := backend.PermitFor(permits, n, i)
	if older >= 0 {
		s.holds = false
		s.wait(q[older], true)
		return
	}
	if s.holds {
		s.permit = p
	}
}

// wait adds r's departure to what the claim waits for, and its admission
// too if admission.
func (s *standing) wait(r queued, admission bool) {
	k := ref{key: r.key, token: r.token}
	s.want[k] = s.want[k] || admission
	s.blockers = append(s.blockers, r)
}
