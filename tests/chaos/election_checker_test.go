package chaos

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The election checks on hand-made histories: each must find what it is
// for, and nothing in a clean history.

func seenTokens(tokens ...uint64) []observed {
	out := make([]observed, len(tokens))
	for i, t := range tokens {
		out[i] = observed{token: t, at: int64(10 * (i + 1))}
	}
	return out
}

func TestObservedStreamChecks(t *testing.T) {
	clean := seenTokens(0, 5, 5, 0, 9, 12, 0)
	require.Empty(t, observedBackwards(clean))
	require.Empty(t, missedTerms([]uint64{5, 12}, clean))

	require.Len(t, observedBackwards(seenTokens(0, 9, 5)), 1, "a lower term after a higher one")
	require.Len(t, observedBackwards(seenTokens(5, 0, 5)), 1, "an ended term yielded again")
	require.Len(t, observedBackwards(seenTokens(5, 9, 0, 9)), 1, "an ended term yielded again")

	missed := missedTerms([]uint64{5, 9, 12}, seenTokens(0, 5, 12, 0))
	require.Len(t, missed, 1)
	require.Contains(t, missed[0], "term 9 led, but Observe never yielded it")
	// Order: the stream is checked as a sequence, not as a set.
	require.Len(t, missedTerms([]uint64{5, 9}, seenTokens(9, 5)), 1)
}

func TestWrongOwners(t *testing.T) {
	acqs := []acquisition{{holder: 14, token: 5}, {holder: 15, token: 9}}
	good := []observed{{token: 5, owner: "child-14", value: "candidate-14"}, {token: 0}, {token: 9, owner: "child-15", value: "candidate-15"}}
	require.Empty(t, wrongOwners(good, acqs))
	bad := []observed{{token: 9, owner: "child-14", value: "candidate-14"}}
	require.Len(t, wrongOwners(bad, acqs), 1)
	// A term yielded that no lead call is known for: a candidate's, or a
	// phantom.
	require.Empty(t, wrongOwners([]observed{{token: 7, owner: "child-15", value: "candidate-15"}}, acqs))
	require.Len(t, wrongOwners([]observed{{token: 7, owner: "someone", value: "x"}}, acqs), 1)
	require.Len(t, wrongOwners([]observed{{token: 7, owner: "child-15", value: "candidate-14"}}, acqs), 1)
}

// A leader that writes with its term after a newer term has written - the
// negative control's late leader - must be caught by every register check
// when the fence is off, and be refused when it is on.
func TestElectionCheckCatchesALateLeader(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		clk := newClock()
		reg := newResource(clk, electionResource, fenced)
		v, ok := reg.read(14, 5)
		require.True(t, ok)
		require.True(t, reg.write(14, 5, v+1, "c14-1"))
		v5, _ := reg.read(14, 5) // term 5 reads, then is paused
		v9, _ := reg.read(15, 9) // term 9 leads
		require.True(t, reg.write(15, 9, v9+1, "c15-1"))
		late := reg.write(14, 5, v5+1, "c14-2") // term 5 writes late
		require.Equal(t, !fenced, late)

		acqs := []acquisition{{holder: 14, token: 5, returned: 1}, {holder: 15, token: 9, returned: 2}}
		seen := seenTokens(0, 5, 9)
		res := checkElection("unit", reg, acqs, seen, clk.now()/2, ttl)
		if fenced {
			require.Equal(t, porcupine.Ok, res.check)
			require.Zero(t, res.lost)
			require.Empty(t, res.outOfOrder)
			require.Equal(t, []uint64{5, 9}, res.wrote)
		} else {
			require.Equal(t, porcupine.Illegal, res.check)
			require.Equal(t, 1, res.lost)
			require.Len(t, res.outOfOrder, 1)
			removeViz(t, []string{res.viz})
		}
		require.Empty(t, res.missed)
		require.Empty(t, res.backwards)
	}
}

// A leader that still believes it leads after a later term's lead began -
// the probes' negative control - must be found by the strict mutex model
// over the terms whether or not it wrote, with the mutex model's
// exemption for a revoked term (judged by the TTL instead) and nothing
// found in a clean history.
func TestElectionCheckCatchesTwoLeaders(t *testing.T) {
	clk := newClock()
	reg := newResource(clk, electionResource, true)
	// Term 5 writes during the faults, term 9 after: a clean register.
	v, ok := reg.read(14, 5)
	require.True(t, ok)
	require.True(t, reg.write(14, 5, v+1, "c14-1"))
	healed := clk.now()
	v, ok = reg.read(15, 9)
	require.True(t, ok)
	require.True(t, reg.write(15, 9, v+1, "c15-1"))
	seen := []observed{{token: 5, owner: "child-14", value: "candidate-14", at: 10}, {token: 9, owner: "child-15", value: "candidate-15", at: 20}}
	term9 := acquisition{holder: 15, token: 9, returned: 200, believed: 300, probed: true}
	check := func(term5 acquisition) *electionResult {
		t.Helper()
		term5.holder, term5.token, term5.returned = 14, 5, 100
		res := checkElection("unit", reg, []acquisition{term5, term9}, seen, healed, ttl)
		require.Equal(t, porcupine.Ok, res.check)
		require.Empty(t, res.outOfOrder)
		require.Empty(t, res.missed)
		require.Empty(t, res.wrongOwner)
		return res
	}

	clean := check(acquisition{believed: 150, probed: true, lost: true})
	assert.Empty(t, clean.twoLeaders)
	assert.Empty(t, clean.problems)
	assert.Zero(t, clean.violations())
	assert.Equal(t, 2, clean.probedTerms)
	assert.Equal(t, 1, clean.lostTerms)
	assert.Equal(t, time.Duration(50), clean.closest, "term 5 stopped believing 50ns before term 9 began")

	two := check(acquisition{believed: 250, probed: true})
	require.Len(t, two.twoLeaders, 1, "term 5 believed after term 9's lead began")
	assert.Equal(t, uint64(5), two.twoLeaders[0].earlier.token)
	assert.Equal(t, uint64(9), two.twoLeaders[0].later.token)
	assert.Equal(t, time.Duration(50), two.twoLeaders[0].by)
	assert.Contains(t, leaderOverlap(two.twoLeaders[0]), "candidate 14 (term 5) still believed it led 50ns after candidate 15's term 9 began")
	assert.Empty(t, two.problems)
	assert.Equal(t, 1, two.violations())

	// Never probed: nothing is known of its belief.
	assert.Empty(t, check(acquisition{}).twoLeaders)

	// Revoked: the key went at once, so the belief is judged by the TTL.
	revoked := check(acquisition{believed: 250, probed: true, revoked: 120, lost: true})
	assert.Empty(t, revoked.twoLeaders)
	assert.Empty(t, revoked.problems)
	assert.Equal(t, time.Duration(-1), revoked.closest, "a revoked term is no close call")
	tooLong := check(acquisition{believed: 120 + int64(ttl) + 1, probed: true, revoked: 120})
	assert.Empty(t, tooLong.twoLeaders)
	assert.Len(t, tooLong.problems, 1, "believed past the TTL after the revocation")

	doneButAlive := check(acquisition{believed: 150, probed: true, doneButValid: 1})
	assert.Len(t, doneButAlive.problems, 1)
}

// A term never yielded is excused only if it lay wholly inside a gap of
// the observer's listener.
func TestExcuseGaps(t *testing.T) {
	acqs := []acquisition{{token: 9, returned: 100, believed: 150}, {token: 12, returned: 180, believed: 260}}
	res := &electionResult{missed: missedTerms([]uint64{5, 9, 12}, seenTokens(0, 5, 0))}
	require.Len(t, res.missed, 2)
	res.excuseGaps(acqs, []listenerGap{{from: 90, to: 200}})
	require.Len(t, res.missedInGap, 1)
	require.Contains(t, res.missedInGap[0], "term 9 ")
	require.Len(t, res.missed, 1, "term 12 outlasted the gap")
	require.Contains(t, res.missed[0], "term 12 ")
}

// A term never yielded while the observer's route held its bytes stays
// missed, with when that was.
func TestMarkHeld(t *testing.T) {
	acqs := []acquisition{{token: 9, returned: 100, believed: 150}, {token: 12, returned: 180, believed: 260}}
	res := &electionResult{missed: missedTerms([]uint64{5, 9, 12}, seenTokens(0, 5, 0))}
	res.markHeld(acqs, []listenerGap{{from: 90, to: 200}})
	require.Len(t, res.missed, 2, "still violations")
	assert.Contains(t, res.missed[0], "term 9 ")
	assert.Contains(t, res.missed[0], "connections were held")
	assert.NotContains(t, res.missed[1], "connections were held", "term 12 outlasted the hold")
}

// Gaps that overlap are one: a fault's estimated gap and the one the
// observer's Backend reported together excuse a term that neither covers
// alone; a term past both stays missed.
func TestExcuseMergedGaps(t *testing.T) {
	require.Equal(t, []listenerGap{{10, 30}, {40, 50}}, mergeGaps([]listenerGap{{40, 50}, {15, 30}, {10, 20}}))
	acqs := []acquisition{{token: 9, returned: 12, believed: 28}, {token: 12, returned: 35, believed: 45}}
	res := &electionResult{missed: missedTerms([]uint64{5, 9, 12}, seenTokens(0, 5, 0))}
	res.excuseGaps(acqs, []listenerGap{{10, 20}, {15, 30}, {40, 50}})
	require.Len(t, res.missedInGap, 1)
	require.Contains(t, res.missedInGap[0], "term 9 ")
	require.Len(t, res.missed, 1, "term 12 began before the second gap")
}
