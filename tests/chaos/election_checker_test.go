package chaos

import (
	"testing"

	"github.com/anishathalye/porcupine"
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
		res := checkElection("unit", reg, acqs, seen, clk.now()/2)
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
