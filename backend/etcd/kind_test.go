package etcd

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// A claim's kind is read back from its name, and only non-shared names
// fall in the range [dir+"0", dir+"g").
func TestKindNames(t *testing.T) {
	for _, k := range []backend.Kind{exclusive, {Shared: true, Permits: 1}, {Permits: 2}, {Permits: backend.MaxPermits}} {
		for _, slot := range []int{0, 3} {
			name := kindName(k, claimName(0x1fa, slot))
			assert.Equal(t, k, kindOfName(name), name)
			assert.Equal(t, k, kindOfName("p/claims/x/"+name), name)
			inRange := name >= "0" && name < "g"
			assert.Equal(t, !k.Shared, inRange, name)
		}
	}
	assert.Equal(t, "s1fa", kindName(backend.Kind{Shared: true, Permits: 1}, "1fa"))
	assert.Equal(t, "1fa-2.7", kindName(backend.Kind{Permits: 7}, "1fa-2"))
	assert.Equal(t, exclusive, kindOfName("1.x"), "an unparsable count reads as exclusive")
	assert.True(t, agrees(backend.Kind{Permits: 3}, "1.3"))
	assert.False(t, agrees(backend.Kind{Permits: 3}, "1"))
	assert.True(t, agrees(exclusive, "s1"), "shared and exclusive claims agree")
}

// A multi-key claim gets one name, free in every one of its directories,
// and is registered under each of its keys until forgotten.
func TestRegistryMultiKeyNames(t *testing.T) {
	tm := newTestMux(t)
	r := newRegistry(tm.mux, nil)
	busy := r.addOne("b/", 1, nil) // takes "1" in b/ only
	e := r.add([]string{"a/", "b/", "c/"}, exclusive, 1, nil)
	assert.Equal(t, []string{"a/1-1", "b/1-1", "c/1-1"}, e.keys)
	assert.Equal(t, "a/1-1", e.key)
	s := r.add([]string{"a/", "b/"}, backend.Kind{Shared: true, Permits: 1}, 1, nil)
	assert.Equal(t, []string{"a/s1", "b/s1"}, s.keys)
	c := r.add([]string{"a/"}, backend.Kind{Permits: 4}, 1, nil)
	assert.Equal(t, "a/1.4", c.key)
	assert.Equal(t, []string{"a/1.4"}, c.keys)
	r.forget(busy)
	r.forget(e)
	e2 := r.add([]string{"a/", "b/"}, exclusive, 1, nil)
	assert.Equal(t, []string{"a/1", "b/1"}, e2.keys, "forgotten names are free at every key")
}

// A multi-key claim lost at any one of its keys is reported once, its
// remains at the other keys are handed to abandon, and its name stays
// taken at every key until abandon has removed them (forget): a new claim
// under the name would take those remains for its own.
func TestRegistryMultiKeyLoss(t *testing.T) {
	tm := newTestMux(t)
	type abandoned struct {
		e     *entry
		token int64
	}
	gone := make(chan abandoned, 2)
	r := newRegistry(tm.mux, func(e *entry, token int64) { gone <- abandoned{e, token} })
	lost := make(lossRecorder, 2)
	r.holdDelay = 0
	e := r.add([]string{"a/", "b/"}, exclusive, 1, lost)
	tm.e.put("a/1")
	token := tm.e.put("b/1")
	r.setToken(e, token)
	require.True(t, r.promote(e))
	tm.e.waitFor(t, func() bool { return len(tm.e.createsLocked(0)) == 2 }, "a watch per key")
	tm.e.del("b/1")
	recv(t, lost, "OnLost")
	recv(t, e.lost, "lost closed")
	assert.Equal(t, abandoned{e, token}, recv(t, gone, "abandon"))
	tm.e.del("a/1")
	barrier(t, tm)
	none(t, lost, "a second OnLost")
	none(t, gone, "a second abandon")
	assert.Equal(t, []string{"a/1-1", "b/1-1"}, r.add([]string{"a/", "b/"}, exclusive, 1, nil).keys,
		"the lost claim's name while its remains may exist")
	assert.False(t, r.end(e), "end of a lost claim")
	r.forget(e)
	assert.Equal(t, []string{"a/1", "b/1"}, r.add([]string{"a/", "b/"}, exclusive, 1, nil).keys)
}
