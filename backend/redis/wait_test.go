package redis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

func TestHandedOffOnlyByTheClaimJustAhead(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	b := &Backend{notify: true}
	a := &acquisition{b: b, req: backend.AcquireRequest{ID: "me"}, keys: []string{"k"}, token: 30}
	me := queued{id: "me", token: 30}
	q := [][]queued{{{id: "x", token: 10}, {id: "y", token: 20}, me}}

	got, ok := a.handedOff(q, handoff{claimEvent: ev("k", 20), at: at})
	assert.True(t, ok, "the claim just ahead left the head: nothing is ahead any more")
	assert.Equal(t, [][]queued{{me}}, got)

	for name, h := range map[string]handoff{
		"none heard":                      {},
		"a claim further ahead left":      {ev("k", 10), at, false},
		"the claim just ahead, elsewhere": {ev("other", 20), at, false},
	} {
		_, ok := a.handedOff(q, h)
		assert.False(t, ok, name)
	}

	_, ok = a.handedOff([][]queued{{me}}, handoff{claimEvent: ev("k", 20), at: at})
	assert.False(t, ok, "not in the queue as read behind that claim")
	multi := &acquisition{b: b, req: a.req, keys: []string{"k", "l"}, token: 30}
	_, ok = multi.handedOff([][]queued{q[0], {{id: "z", token: 20}, me}}, handoff{claimEvent: ev("k", 20), at: at})
	assert.False(t, ok, "a multi-key claim may still wait at its other keys")

	unheard := &acquisition{b: &Backend{}, req: a.req, keys: a.keys, token: 30}
	_, ok = unheard.handedOff(q, handoff{claimEvent: ev("k", 20), at: at})
	assert.False(t, ok, "without notifications the deletion of its own lease is not heard before the release")
}

// A reply of enqueueScript shorter than its status says is an error, not
// a read past its end (a panic).
func TestShortEnqueueRepliesAreErrors(t *testing.T) {
	for _, v := range [][]any{
		{}, {"ok"}, {"ok", "5", "1700000000000"}, {"queued", "5"}, {"exists"}, {"mismatch"}, {"what"},
	} {
		var err error
		require.NotPanics(t, func() { _, err = parseEnqueueReply(v) }, "%v", v)
		assert.Error(t, err, "%v", v)
	}
	r, err := parseEnqueueReply([]any{"ok", "5", "1700000000000", "0"})
	require.NoError(t, err)
	assert.Equal(t, uint64(5), r.token)
	r, err = parseEnqueueReply([]any{"nolease"})
	require.NoError(t, err)
	assert.Equal(t, "nolease", r.status)
}
