package backend

import "time"

// Queued is one claim of a key's queue as a store keeps it: what Describe
// needs to list it.
type Queued struct {
	Kind  Kind
	Token uint64
	// Admitted is set once the store has recorded that the claim holds
	// every one of its keys; for a counted claim that record is its
	// permit. A claim the rule admits at this key but not yet at all its
	// keys (a multi-key claim waiting elsewhere) is listed as a waiter.
	Admitted   bool
	Permit     int // the recorded permit; read only when Admitted
	Owner      string
	Value      []byte
	AcquiredAt time.Time
	Stamp      Timestamp
}

// Describe returns the state of key whose queue is q, in token order, as
// Inspect and Observe report it: the holders (the claims the rule admits
// that are admitted), oldest first, with the oldest one's label, token,
// acquisition time and stamp in the top-level fields; the permit count
// the queue agrees on (that of its oldest claim); and, only if waiters is
// set, every other claim in queue order. Values are not copied.
func Describe(key string, q []Queued, waiters bool) LockInfo {
	info := LockInfo{Key: key}
	if len(q) == 0 {
		return info
	}
	info.Permits = q[0].Kind.Permits
	var s scan
	free := true
	for i := range q {
		c := &q[i]
		free = free && s.next(c.Kind)
		if !free && !waiters {
			break
		}
		if !free || !c.Admitted {
			if waiters {
				info.Waiters = append(info.Waiters, Waiter{Owner: c.Owner, Token: c.Token, Shared: c.Kind.Shared})
			}
			continue
		}
		info.Holders = append(info.Holders, Holder{
			Owner: c.Owner, Token: c.Token, Permit: max(c.Permit, 0), Shared: c.Kind.Shared,
			Value: c.Value, AcquiredAt: c.AcquiredAt, Stamp: c.Stamp,
		})
	}
	if len(info.Holders) > 0 {
		h := info.Holders[0]
		info.Held, info.Owner, info.Token, info.AcquiredAt, info.Stamp = true, h.Owner, h.Token, h.AcquiredAt, h.Stamp
	}
	return info
}
