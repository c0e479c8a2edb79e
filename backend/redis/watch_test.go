package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/ash-lock/ashlock/backend"
)

func woken(w *watcher) bool {
	select {
	case <-w.wake:
		return true
	default:
		return false
	}
}

func ev(key string, token uint64) claimEvent { return claimEvent{key: key, token: token} }

func TestEventsWakeOnlyTheWaitersTheyConcern(t *testing.T) {
	r := newRegistry(layout{tag: "{t}"}, nil)
	next := r.watch([]string{"k"}, false)
	later := r.watch([]string{"k"}, false)
	counted := r.watch([]string{"k"}, false)
	obs := r.watch([]string{"k"}, true)
	other := r.watch([]string{"other"}, true)
	assert.True(t, r.arm(next, []wanted{{ev("k", 1), false, false}}, nil))
	assert.True(t, r.arm(later, []wanted{{ev("k", 2), false, false}}, nil))
	assert.True(t, r.arm(counted, []wanted{{ev("k", 1), true, false}}, nil))
	assert.True(t, r.arm(obs, nil, nil))
	assert.True(t, r.arm(other, nil, nil))

	r.event(ev("k", 1), admitted, time.Time{}, false)
	assert.False(t, woken(next), "an exclusive waiter woken by the admission of the claim ahead")
	assert.True(t, woken(counted), "a counted waiter not woken by the admission it waits for")
	assert.False(t, woken(obs), "an observer woken by a claim's channel")

	r.event(ev("k", 1), departed, time.Time{}, false)
	assert.True(t, woken(next))
	assert.False(t, woken(later), "a waiter further back woken by a departure it does not wait for")
	assert.False(t, woken(other), "an observer of another key woken")

	r.event(ev("k", 2), departed, time.Time{}, false)
	assert.False(t, woken(obs), "an observer woken by a claim's channel")
	assert.True(t, woken(later))
}

func TestEventsHeardDuringAReadAreNotMissed(t *testing.T) {
	r := newRegistry(layout{tag: "{t}"}, nil)
	w := r.watch([]string{"k"}, false)
	r.event(ev("k", 7), departed, time.Time{}, false) // while the waiter reads
	r.event(ev("k", 8), admitted, time.Time{}, false)
	assert.False(t, r.arm(w, []wanted{{ev("k", 7), false, false}}, nil), "the read may have missed a departure it waits for")
	// arm cleared what it had heard: the next read starts afresh.
	assert.True(t, r.arm(w, []wanted{{ev("k", 7), false, false}}, nil))

	r.disarm(w)
	r.event(ev("k", 8), admitted, time.Time{}, false)
	assert.True(t, r.arm(w, []wanted{{ev("k", 8), false, false}}, nil), "an admission it does not wait for")
	r.disarm(w)
	r.event(ev("k", 8), admitted, time.Time{}, false)
	assert.False(t, r.arm(w, []wanted{{ev("k", 8), true, false}}, nil), "an admission it waits for")

	r.disarm(w)
	r.leaseEnded(3)
	assert.False(t, r.arm(w, nil, []backend.LeaseID{3}), "the end of a lease it waits on")
	r.disarm(w)
	r.leaseEnded(3)
	assert.True(t, r.arm(w, nil, []backend.LeaseID{4}))
	r.leaseEnded(4)
	assert.True(t, woken(w))

	r.disarm(w)
	for i := range maxSeen + 1 {
		r.event(ev("k", uint64(100+i)), departed, time.Time{}, false)
	}
	assert.False(t, r.arm(w, nil, nil), "too much heard: read again")
	r.unwatch(w)
	assert.Empty(t, r.byKey)
	assert.Empty(t, r.byLease)
	assert.Empty(t, r.disarmed)
}

func TestResubscriptionMakesEveryWaiterReadAgain(t *testing.T) {
	r := newRegistry(layout{tag: "{t}"}, nil)
	armed := r.watch([]string{"a"}, false)
	reading := r.watch([]string{"b"}, false)
	assert.True(t, r.arm(armed, []wanted{{ev("a", 1), false, false}}, nil))
	r.resubscribed()
	assert.True(t, woken(armed))
	assert.False(t, r.arm(reading, []wanted{{ev("b", 1), false, false}}, nil), "a read under way may have missed events")
}

func TestLossReachesHoldersOnce(t *testing.T) {
	r := newRegistry(layout{tag: "{t}"}, nil)
	var calls []error
	onLost := backend.LossFunc(func(err error) { calls = append(calls, err) })
	held := r.track(5, "h", onLost, 1)
	assert.True(t, r.promote(held, claimRef{"k", 1}))
	pending := r.track(5, "p", onLost, 1)
	released := r.track(5, "r", onLost, 1)
	assert.True(t, r.promote(released, claimRef{"k2", 2}))
	r.untrackRef(claimRef{"k2", 2})
	elsewhere := r.track(6, "e", onLost, 1)
	assert.True(t, r.promote(elsewhere, claimRef{"k3", 3}))

	cause := errors.New("gone")
	r.lose(5, cause)
	r.lose(5, cause)
	assert.Equal(t, []error{cause}, calls, "OnLost of the one holder on the lease, once")
	assert.True(t, pending.isLost())
	assert.False(t, r.promote(pending, claimRef{"k4", 4}), "an Acquire whose lease ended returned its claim")
	r.untrack(pending)
	assert.NotContains(t, r.claims, backend.LeaseID(5))
	assert.Contains(t, r.claims, backend.LeaseID(6))
}

func TestHeldCountsFollowHoldersAndReleases(t *testing.T) {
	r := newRegistry(layout{tag: "{t}"}, nil)
	a := r.track(1, "c3", nil, 3)
	b := r.track(1, "c1", nil, 1)
	keys, _ := r.heldOn(1)
	assert.Zero(t, keys, "pending claims counted")
	assert.True(t, r.promote(a, claimRef{"a", 1}))
	assert.True(t, r.promote(b, claimRef{"b", 2}))
	keys, rel0 := r.heldOn(1)
	assert.Equal(t, 4, keys)
	r.releasing(claimRef{"a", 1})
	keys, rel := r.heldOn(1)
	assert.Equal(t, 1, keys)
	assert.Equal(t, rel0+1, rel)
	r.untrackRef(claimRef{"a", 1})
	r.untrack(b)
	keys, _ = r.heldOn(1)
	assert.Zero(t, keys)
	c := r.track(1, "c2", nil, 2)
	assert.True(t, r.promote(c, claimRef{"c", 3}))
	r.lose(1, errors.New("gone"))
	keys, rel = r.heldOn(1)
	assert.Zero(t, keys)
	assert.Zero(t, rel)
	assert.Empty(t, r.held)
}

// trackedIDs names every claim of a lease from the start of its Acquire
// until it is released or its Acquire fails, whatever it holds meanwhile:
// removeLeftBehind removes the claims of the lease it does not name.
func TestTrackedOnNamesClaimsUntilDone(t *testing.T) {
	r := newRegistry(layout{tag: "{t}"}, nil)
	pending := r.track(1, "p", nil, 2)
	held := r.track(1, "h", nil, 1)
	assert.True(t, r.promote(held, claimRef{"k", 1}))
	releasing := r.track(1, "r", nil, 3)
	assert.True(t, r.promote(releasing, claimRef{"k", 2}))
	r.releasing(claimRef{"k", 2})
	r.track(2, "elsewhere", nil, 1)

	assert.Equal(t, map[string]struct{}{"p": {}, "h": {}, "r": {}}, r.trackedIDs(1))
	assert.Equal(t, 6, r.trackedEntries(1))

	r.untrack(pending)
	r.untrackRef(claimRef{"k", 2})
	assert.Equal(t, map[string]struct{}{"h": {}}, r.trackedIDs(1), "a failed Acquire's claim and a released one are done")
	assert.Equal(t, 1, r.trackedEntries(1))
}

// fakeSub records the subscription commands a registry sends.
type fakeSub struct {
	subs, unsubs []string
	pings        []uint64
}

func (f *fakeSub) subscribe(chs []string, ping uint64) {
	f.subs = append(f.subs, chs...)
	f.pings = append(f.pings, ping)
}
func (f *fakeSub) unsubscribe(chs []string) { f.unsubs = append(f.unsubs, chs...) }
func (f *fakeSub) ping(seq uint64)          { f.pings = append(f.pings, seq) }

func TestWaitersSubscribeToTheClaimsTheyWaitForAndReadAgainOnceConfirmed(t *testing.T) {
	f := &fakeSub{}
	lay := layout{tag: "{t}"}
	r := newRegistry(lay, f)
	a := r.watch([]string{"k"}, false)
	b := r.watch([]string{"k"}, false)
	obs := r.watch([]string{"k"}, true)

	assert.True(t, r.arm(a, []wanted{{ev("k", 1), false, false}}, nil))
	assert.Equal(t, []string{lay.claimChannel(1)}, f.subs)
	assert.Equal(t, []uint64{1}, f.pings)
	assert.False(t, woken(a), "woken before the subscription is confirmed")
	r.pong(1)
	assert.True(t, woken(a), "not woken to read again once its channel is confirmed")
	assert.True(t, r.onlyConfirmed(a))
	r.disarm(a)
	assert.True(t, r.arm(a, []wanted{{ev("k", 1), false, false}}, nil))
	assert.False(t, r.onlyConfirmed(a), "arm keeps the last wake's reason")
	r.event(ev("k", 1), departed, time.Time{}, false)
	assert.True(t, woken(a))
	assert.False(t, r.onlyConfirmed(a), "an event taken for a confirmation")

	// A second waiter for the same claim shares the channel, confirmed.
	r.disarm(b) // its read starts after the event
	assert.True(t, r.arm(b, []wanted{{ev("k", 1), false, false}}, nil))
	assert.Len(t, f.subs, 1, "a channel subscribed twice")
	r.pong(1)
	assert.False(t, woken(b))

	// Re-armed for another claim: the new channel is subscribed, the old
	// one kept while b holds it.
	r.disarm(a)
	assert.True(t, r.arm(a, []wanted{{ev("k", 2), false, false}}, nil))
	assert.Equal(t, []string{lay.claimChannel(1), lay.claimChannel(2)}, f.subs)
	assert.Empty(t, f.unsubs)
	r.unwatch(b)
	assert.Equal(t, []string{lay.claimChannel(1)}, f.unsubs)

	// After a reconnect the unanswered ping is sent again.
	r.resubscribed()
	assert.True(t, woken(a))
	r.reconfirm()
	assert.Equal(t, []uint64{1, 2, 3}, f.pings)
	r.disarm(a)
	assert.True(t, r.arm(a, []wanted{{ev("k", 2), false, false}}, nil))
	r.pong(3)
	assert.True(t, woken(a))

	r.disarm(obs) // a resubscription made it stale
	assert.True(t, r.arm(obs, nil, nil))
	assert.Contains(t, f.subs, lay.keyChannel("k"), "an observer not on its key's channel")
	r.unwatch(a)
	r.unwatch(obs)
	assert.ElementsMatch(t, []string{lay.claimChannel(1), lay.claimChannel(2), lay.keyChannel("k")}, f.unsubs)
	assert.Empty(t, r.chans)
	assert.Empty(t, r.unconfirmed)
}

func TestAConfirmationDuringAReadIsNotTakenForOneBeforeIt(t *testing.T) {
	r := newRegistry(layout{tag: "{t}"}, &fakeSub{})
	c := r.watch([]string{"k"}, false)
	assert.True(t, r.arm(c, []wanted{{ev("k", 9), false, false}}, nil))
	r.disarm(c) // woken by something else: reads while the SUBSCRIBE is on its way
	r.pong(1)
	assert.True(t, r.arm(c, []wanted{{ev("k", 9), false, false}}, nil))
	assert.True(t, woken(c), "a read that may precede the subscription taken as confirmed")
	assert.True(t, r.onlyConfirmed(c))
	r.disarm(c)
	assert.True(t, r.arm(c, []wanted{{ev("k", 9), false, false}}, nil))
	assert.False(t, woken(c), "woken after a read that followed the confirmation")
	r.unwatch(c)
}

func TestObserversGetTheirKeysMessagesInOrderAndEachGap(t *testing.T) {
	r := newRegistry(layout{tag: "{t}"}, nil)
	o := r.addObserver("k")
	other := r.addObserver("x")
	r.keyMessage("k", keyMessage{marker: "1"})
	r.keyMessage("k", keyMessage{marker: "2"})
	select {
	case <-o.signal:
	default:
		t.Fatal("an observer not signalled")
	}
	assert.Equal(t, []inboxItem{{msg: keyMessage{marker: "1"}}, {msg: keyMessage{marker: "2"}}}, r.take(o))
	assert.Empty(t, r.take(other), "another key's observer got the message")

	from := r.verified
	r.gapStarted()
	r.keyMessage("k", keyMessage{marker: "3"}) // may follow lost ones
	late := r.addObserver("k")                 // comes during the gap
	r.keyMessage("k", keyMessage{marker: "4"})
	r.resubscribed()
	r.keyMessage("k", keyMessage{marker: "5"})
	want := []inboxItem{{resync: true, from: from}, {msg: keyMessage{marker: "5"}}}
	assert.Equal(t, want, r.take(o))
	assert.Equal(t, want, r.take(late))
	assert.Equal(t, []inboxItem{{resync: true, from: from}}, r.take(other))

	r.setLeases(o, []backend.LeaseID{7})
	assert.True(t, r.leaseEnded(7), "an observed holder's lease is not reaped at once")
	assert.False(t, r.leaseEnded(8))
	r.dropObserver(o)
	r.dropObserver(late)
	r.dropObserver(other)
	assert.False(t, r.leaseEnded(7))
	assert.Empty(t, r.observers)
}

// A gap starts when the last ping answered was sent: every message
// published before it had arrived by its answer, any later one may be
// lost. An answer to a ping never sent is not taken for one.
func TestAGapStartsAtTheLastPingAnswered(t *testing.T) {
	f := &fakeSub{}
	r := newRegistry(layout{tag: "{t}"}, f)
	o := r.addObserver("k")
	r.healthPing()
	sent := r.sent[0].at
	assert.True(t, r.pong(1))
	assert.Equal(t, sent, r.verified)
	assert.Empty(t, r.sent)
	r.healthPing() // never answered: the connection breaks
	r.gapStarted()
	r.healthPing()
	r.resubscribed()
	assert.Equal(t, []inboxItem{{resync: true, from: sent}}, r.take(o))
	assert.Equal(t, []uint64{1, 2, 3}, f.pings)

	assert.False(t, r.pong(4), "an answer to a ping never sent")
	assert.False(t, r.pong(0))
	assert.True(t, r.pong(3))
	assert.Empty(t, r.sent, "the pings the answer accounts for are kept")

	// Without a break seen (go-redis replaced the connection between two
	// reads), the gap starts at the last ping answered too.
	r.resubscribed()
	assert.Equal(t, []inboxItem{{resync: true, from: r.verified}}, r.take(o))
	r.dropObserver(o)
}

func TestAHeadDepartureHeardIsKeptArmedOrNot(t *testing.T) {
	r := newRegistry(layout{tag: "{t}"}, nil)
	w := r.watch([]string{"k"}, false)
	obs := r.watch([]string{"k"}, true)
	at := time.UnixMilli(1_700_000_000_123)
	assert.Zero(t, r.lastHandoff(w, r.gapCount()))

	// Heard while armed: kept past the disarm that follows the wake.
	assert.True(t, r.arm(w, []wanted{{ev("k", 1), false, false}}, nil))
	r.event(ev("k", 1), departed, at, false)
	assert.True(t, woken(w))
	r.disarm(w)
	assert.Equal(t, handoff{ev("k", 1), at, false}, r.lastHandoff(w, r.gapCount()))

	// A departure that was not from the head changes nothing; one heard
	// while disarmed (during a read) is kept too.
	r.event(ev("k", 2), departed, time.Time{}, false)
	assert.Equal(t, handoff{ev("k", 1), at, false}, r.lastHandoff(w, r.gapCount()))
	r.event(ev("k", 2), departed, at.Add(time.Millisecond), true)
	assert.Equal(t, handoff{ev("k", 2), at.Add(time.Millisecond), true}, r.lastHandoff(w, r.gapCount()))
	assert.Zero(t, r.lastHandoff(obs, r.gapCount()), "an observer follows its key's channel instead")

	// A break of the stream since the read began (noted by the gap count
	// then) voids it, and so does its restoration: what the gap lost may
	// include the deletion of the waiter's own lease.
	read := r.gapCount()
	r.gapStarted()
	assert.Zero(t, r.lastHandoff(w, read), "the stream broke since the read began")
	read = r.gapCount()
	r.resubscribed()
	assert.Zero(t, r.lastHandoff(w, read), "the stream was restored since the read began")
	read = r.gapCount()
	assert.Equal(t, handoff{ev("k", 2), at.Add(time.Millisecond), true}, r.lastHandoff(w, read))
}

func TestParseClaimMessage(t *testing.T) {
	e, what, head, recorded, ok := parseClaimMessage("d 42 a key")
	assert.True(t, ok)
	assert.Equal(t, ev("a key", 42), e)
	assert.Equal(t, byte(departed), what)
	assert.True(t, head.IsZero())
	assert.False(t, recorded)

	e, what, head, recorded, ok = parseClaimMessage("h 42 1700000000123 a key")
	assert.True(t, ok)
	assert.Equal(t, ev("a key", 42), e)
	assert.Equal(t, byte(departed), what, "a departure from the head is a departure")
	assert.Equal(t, time.UnixMilli(1_700_000_000_123), head)
	assert.False(t, recorded)

	_, what, head, recorded, ok = parseClaimMessage("H 42 1700000000123 a key")
	assert.True(t, ok)
	assert.Equal(t, byte(departed), what)
	assert.Equal(t, time.UnixMilli(1_700_000_000_123), head)
	assert.True(t, recorded, "the run recorded the time in the claim behind")

	e, what, _, _, ok = parseClaimMessage("a 7 k")
	assert.True(t, ok)
	assert.Equal(t, ev("k", 7), e)
	assert.Equal(t, byte(admitted), what)

	for _, bad := range []string{"", "d", "d 42", "dd 42 k", "d x k", "h 42 k", "h 42 x k", "H 42 k"} {
		_, _, _, _, ok := parseClaimMessage(bad)
		assert.False(t, ok, bad)
	}
}

func TestParseBehindMessage(t *testing.T) {
	id, e, head, recorded, ok := parseBehindMessage("d 42 0 5 abcdea key")
	assert.True(t, ok)
	assert.Equal(t, "abcde", id)
	assert.Equal(t, ev("a key", 42), e, "the key follows the id, spaces and all")
	assert.True(t, head.IsZero())
	assert.False(t, recorded)

	_, _, head, recorded, ok = parseBehindMessage("h 42 1700000000123 1 xk")
	assert.True(t, ok)
	assert.Equal(t, time.UnixMilli(1_700_000_000_123), head)
	assert.False(t, recorded)

	id, e, head, recorded, ok = parseBehindMessage("H 42 1700000000123 1 xk")
	assert.True(t, ok)
	assert.Equal(t, "x", id)
	assert.Equal(t, ev("k", 42), e)
	assert.Equal(t, time.UnixMilli(1_700_000_000_123), head)
	assert.True(t, recorded, "the run recorded the time in the claim told")

	for _, bad := range []string{"", "d 42 0 1", "a 42 0 1 xk", "d x 0 1 xk", "d 42 x 1 xk", "d 42 0 x xk", "d 42 0 -1 xk", "d 42 0 9 xk"} {
		_, _, _, _, ok := parseBehindMessage(bad)
		assert.False(t, ok, bad)
	}
}
