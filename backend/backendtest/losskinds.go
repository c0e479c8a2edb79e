package backendtest

import (
	"errors"

	"github.com/ash-lock/ashlock/backend"
)

// testRevokeSignalsLossOfEveryKind revokes a lease with a shared, a
// counted and a multi-key holder on it: each gets OnLost once, holders on
// another lease keep their claims and hear nothing, the counted waiter
// takes the lost permit, and the multi-key claim's keys are all freed.
func testRevokeSignalsLossOfEveryKind(f *fixture) {
	const sk, ck = "losskinds/shared", "losskinds/counted"
	mk := []string{"losskinds/multi/a", "losskinds/multi/b"}
	doomed, other := f.grant(holdTTL), f.grant(holdTTL)

	lostS, lostC, lostM := newLostRecorder(), newLostRecorder(), newLostRecorder()
	keptS, keptC := newLostRecorder(), newLostRecorder()
	s := f.acquire(lostTo(shared(req(sk, doomed, "S")), lostS))
	s2 := f.acquire(lostTo(shared(req(sk, other, "S2")), keptS))
	x := f.start(req(sk, other, "X"))
	f.awaitWaiters(sk, "X")
	c := f.acquire(lostTo(counted(req(ck, doomed, "C"), 2), lostC))
	c2 := f.acquire(lostTo(counted(req(ck, other, "C2"), 2), keptC))
	w := f.start(counted(req(ck, other, "W"), 2))
	f.awaitWaiters(ck, "W")
	m := f.acquire(lostTo(multi(doomed, "M", mk...), lostM))

	if err := f.b.Revoke(f.ctx(), doomed.ID); err != nil {
		f.t.Fatalf("Revoke: %v", err)
	}
	f.awaitLost(lostS, "shared holder S", f.timeout)
	f.awaitLost(lostC, "counted holder C", f.timeout)
	f.awaitLost(lostM, "multi-key holder M", f.timeout)

	wc := f.got(w)
	if wc.Permit != c.Permit {
		f.t.Errorf("W got permit %d, want the lost holder's %d", wc.Permit, c.Permit)
	}
	f.wantHolders(ck, "C's lease revoked", c2, wc)
	f.stillWaiting("S2 still holds "+sk, x)
	f.wantHolders(sk, "S's lease revoked", s2)
	for _, k := range mk {
		f.wantFree(k, "M's lease revoked")
	}
	if err := f.b.Release(f.ctx(), m); err != nil {
		f.t.Errorf("Release of a multi-key claim lost with its lease: %v, want nil", err)
	}
	if err := f.b.SetValue(f.ctx(), s, []byte("late")); !errors.Is(err, backend.ErrLeaseExpired) {
		f.t.Errorf("SetValue of a shared claim lost with its lease: %v, want ErrLeaseExpired", err)
	}

	f.release(s2)
	f.release(f.got(x))
	f.releaseAll(c2, wc)
	f.stillWaiting("OnLost settles")
	for _, r := range []struct {
		name string
		rec  *lostRecorder
		want int
	}{{"S", lostS, 1}, {"C", lostC, 1}, {"M", lostM, 1}, {"S2 (other lease)", keptS, 0}, {"C2 (other lease)", keptC, 0}} {
		if got := len(r.rec.calls()); got != r.want {
			f.t.Errorf("OnLost of %s called %d times, want %d", r.name, got, r.want)
		}
	}
}
