package backend_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

func TestBackoffDoublesUpToItsBound(t *testing.T) {
	var bo backend.Backoff
	var got []time.Duration
	for range 7 {
		got = append(got, bo.Next())
	}
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}, got)
	bo.Reset()
	assert.Equal(t, backend.MinBackoff, bo.Next(), "the first pause after Reset")
}

// Retry tries at once only if asked to, pauses as Backoff says between
// tries, stops at the first success, and gives up when done closes.
func TestRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		ok := backend.Retry(nil, false, func() bool {
			at = append(at, time.Since(start))
			return len(at) == 3
		})
		require.True(t, ok, "Retry of a try that succeeds the third time")
		assert.Equal(t, []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 350 * time.Millisecond}, at, "when the tries ran")

		tries := 0
		assert.True(t, backend.Retry(nil, true, func() bool { tries++; return true }), "Retry now of a try that succeeds")
		assert.Equal(t, 1, tries, "tries of Retry now that succeeds at once")

		done := make(chan struct{})
		tries = 0
		time.AfterFunc(time.Minute, func() { close(done) })
		start = time.Now()
		assert.False(t, backend.Retry(done, true, func() bool { tries++; return false }), "Retry of a try that always fails")
		assert.Equal(t, time.Minute, time.Since(start), "how long Retry tried before done closed")
		assert.Equal(t, 1+5+58, tries, "tries: at once, after five pauses that add up to 1.55 s, then one a second")
	})
}
