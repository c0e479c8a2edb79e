package ashlock

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The hub passes on changes only, never a term older than one seen and
// never a term that has ended, whatever a backend sends it.
func TestHubOfferFiltersBackwardsAndRepeats(t *testing.T) {
	start := &state{ready: make(chan struct{})}
	h := &hub{reg: &hubs{}, tail: start}
	l := func(token uint64, v string) Leader { return Leader{Name: "e", Token: token, Value: []byte(v)} }
	for _, in := range []Leader{
		l(5, "a"),
		l(5, "a"), // repeat: dropped
		l(3, "x"), // older term: dropped
		l(5, "b"), // value change of the current term
		l(0, ""),  // no leader
		l(0, ""),  // repeat: dropped
		l(5, "b"), // the ended term again: dropped
		l(7, "c"),
		l(6, "d"), // older: dropped
		{Name: "e", Token: 7, Value: []byte("c"), Owner: "o"}, // owner change
	} {
		h.offer(in)
	}
	want := []Leader{l(5, "a"), l(5, "b"), l(0, ""), l(7, "c"), {Name: "e", Token: 7, Value: []byte("c"), Owner: "o"}}
	var got []Leader
	for at := start; at != h.tail; {
		select {
		case <-at.ready:
		default:
			t.Fatal("a state with a next one has not woken its readers")
		}
		at = at.next
		assert.NoError(t, at.err)
		got = append(got, at.leader)
	}
	assert.Equal(t, len(want), len(got), "%v", got)
	for i := range min(len(want), len(got)) {
		assert.Equal(t, want[i].Token, got[i].Token, "state %d", i)
		assert.Equal(t, string(want[i].Value), string(got[i].Value), "state %d", i)
		assert.Equal(t, want[i].Owner, got[i].Owner, "state %d", i)
	}
}
