package chaos

import (
	"context"
	"slices"
	"strings"
	"time"
)

// Faults on child holders: lease revocations and SIGSTOP pauses.

// childIDs lists the children's holder IDs in order.
func (inj *injector) childIDs() []int {
	ids := make([]int, 0, len(inj.children))
	for id := range inj.children {
		ids = append(ids, id)
	}
	// Map order is random; the schedule's pick must mean the same child
	// in every replay.
	slices.Sort(ids)
	return ids
}

// revoke revokes the lease of a child's claim on a lock, as an operator
// might: the holder's if a child holds the lock and the fault aims at it,
// else a queued child's (whose Acquire must then fail, not go on to hold
// the key). The lock is one of inj.revokeKeys: with children of several
// workloads, the schedule's pick chooses whose. Only children are targets: a revocation takes the key away at
// once, and the holder can only learn of it afterwards (guarantee 4), so
// the strict mutex model - checked on the holders in this process - does
// not apply to it.
func (inj *injector) revoke(ctx context.Context, f fault) {
	// The lock changes hands several times a second, so a moment with no
	// child claim, or a claim that goes before it is found, is common:
	// look again a few times before giving up.
	// It gives up after revokeBudget, though: when the store does not
	// answer (a server stopped or restarting), trying for longer only
	// holds up the faults behind it.
	var outcome string
	giveUp := time.Now().Add(revokeBudget)
	for attempt := range revokeAttempts {
		if attempt > 0 && (time.Now().After(giveUp) || !waitUntil(ctx, time.Now().Add(revokeRetry))) {
			break
		}
		if outcome = inj.revokeOnce(ctx, f, attempt); revoked(outcome) {
			break
		}
	}
	inj.count(outcome)
}

// revoked reports whether a revocation's outcome is a lease revoked.
func revoked(outcome string) bool {
	return strings.HasPrefix(outcome, "lease-revoke") && !strings.Contains(outcome, "failed") && !strings.Contains(outcome, "skipped")
}

// revokeKey chooses the key a revocation's attempt looks at, and the name
// to count it under. Other bits of the pick than the ones that choose
// among the key's claims are used, so that with one workload the choice
// of claim is what it always was. A workload of several keys (the
// accounts) is looked at one key per attempt, in turn: a child's LockAll
// holds only some of them.
func (inj *injector) revokeKey(f fault, attempt int) (key, kind string) {
	if len(inj.revokeKeys) == 0 {
		return lockKey, "lease-revoke"
	}
	w := inj.revokeKeys[(f.pick>>32)%uint64(len(inj.revokeKeys))]
	return w.keys[((f.pick>>48)+uint64(attempt))%uint64(len(w.keys))], w.kind
}

// revokeOnce makes one attempt and returns the outcome to count.
func (inj *injector) revokeOnce(ctx context.Context, f fault, attempt int) string {
	rctx, cancel := context.WithTimeout(ctx, revokeTimeout)
	defer cancel()
	key, kind := inj.revokeKey(f, attempt)
	info, err := inj.inspect.Inspect(rctx, key)
	if err != nil {
		inj.logf("fault %v: inspect: %v", f, err)
		return "lease-revoke failed (cluster busy)"
	}
	// Children holding the key: every holder of a counted lock, the one
	// holder of the others.
	var held []uint64
	for _, h := range info.Holders {
		if strings.HasPrefix(h.Owner, childOwner) {
			held = append(held, h.Token)
		}
	}
	if len(info.Holders) == 0 && info.Held && strings.HasPrefix(info.Owner, childOwner) {
		held = append(held, info.Token)
	}
	holding := len(held) > 0
	var queued []uint64
	for _, w := range info.Waiters {
		if strings.HasPrefix(w.Owner, childOwner) {
			queued = append(queued, w.Token)
		}
	}
	var token uint64
	switch {
	case holding && (f.current || len(queued) == 0):
		token = held[f.pick%uint64(len(held))]
	case len(queued) > 0:
		token = queued[f.pick%uint64(len(queued))]
	default:
		return "lease-revoke skipped (no child had a claim)"
	}
	lease, found, err := inj.st.revokeLease(rctx, inj.prefix, key, token)
	switch {
	case err != nil:
		// Not a test failure: the cluster may be without a leader just
		// now, the server down, or the lease may have ended meanwhile.
		inj.logf("fault %v: %v", f, err)
		return "lease-revoke failed (cluster busy)"
	case !found:
		return "lease-revoke skipped (the claim went meanwhile)"
	}
	inj.revoked(token)
	what := "a queued"
	if slices.Contains(held, token) {
		what = "a holding"
	}
	inj.logf("fault %v: revoked %s of %s claim on %s, token %d", f, lease, what, key, token)
	return kind
}

func (inj *injector) freeze(ctx context.Context, f fault) func() error {
	ids := inj.childIDs()
	if len(ids) == 0 {
		return nil
	}
	// Aim the pause between a read and its write: wait (briefly) for a
	// child to be answered a read - the current holder if it is a child
	// and the fault aims at it, else any child, which then holds the lock
	// - and freeze that one. Stale notifications are dropped first.
	want := -1
	if f.current {
		if cur := int(inj.current.Load()); inj.children[cur] != nil {
			want = cur
		}
	}
	for len(inj.served) > 0 {
		<-inj.served
	}
	target, aimed := -1, false
	deadline := time.NewTimer(aimTimeout)
	defer deadline.Stop()
	for target < 0 {
		select {
		case id := <-inj.served:
			if want < 0 || id == want {
				target, aimed = id, true
			}
		case <-deadline.C:
			if want < 0 {
				target = ids[f.pick%uint64(len(ids))]
				break
			}
			// The aimed-at holder did not read in time (it may have let
			// go of the lock): take the next child that does.
			want = -1
			deadline.Reset(aimTimeout)
		case <-ctx.Done():
			return nil
		}
	}
	ch := inj.children[target]
	if err := ch.freeze(); err != nil {
		inj.fail(err)
		return nil
	}
	if aimed {
		inj.count("sigstop")
	} else {
		inj.count("sigstop (not after a read)")
	}
	inj.logf("fault %v: froze holder %d (after a read: %v)", f, ch.id, aimed)
	return ch.thaw
}
