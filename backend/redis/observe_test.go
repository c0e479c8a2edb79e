package redis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// TestObserverDropsWhatItsReadSaw: the messages of the key's channel up to
// the read's own marker were published by runs the read saw, and applying
// them again would yield states from before it; other reads' markers mean
// nothing to it.
func TestObserverDropsWhatItsReadSaw(t *testing.T) {
	r := newRegistry(layout{tag: "{t}"}, nil)
	o := r.addObserver("k")
	defer r.dropObserver(o)
	var got []uint64 // the holder's token of each state yielded
	v := &view{b: &Backend{reg: r}, key: "k", o: o, ends: map[backend.LeaseID]time.Time{},
		yield: func(info backend.LockInfo, err error) bool {
			require.NoError(t, err)
			got = append(got, info.Token)
			return true
		}}
	holder := func(token uint64) queued {
		return queued{id: "c", token: token, lease: 1, kind: backend.Kind{Permits: 1}, admitted: true, owner: "o", pttl: -1}
	}
	join := func(token uint64) keyMessage {
		return keyMessage{changes: []keyChange{{kind: 'j', c: holder(token), pttl: -1}}}
	}
	depart := func(token uint64) keyMessage {
		return keyMessage{changes: []keyChange{{kind: 'd', c: queued{token: token}, pttl: -1}}}
	}

	// The read found 7 holding: 5 had joined and left before it; 9 joined
	// after it, and took over when 7 left.
	v.claims, v.await = []queued{holder(7)}, "mine"
	require.NoError(t, v.emit(true))
	for _, m := range []keyMessage{join(5), {marker: "theirs"}, depart(5), join(7), {marker: "mine"}, join(9), depart(7)} {
		require.NoError(t, v.apply(m))
	}
	assert.Equal(t, []uint64{7, 9}, got, "5, which the read saw gone, yielded again; or 9 not yielded")
	assert.Empty(t, v.await)
	require.Len(t, v.claims, 1)
	assert.Equal(t, uint64(9), v.claims[0].token)
}
