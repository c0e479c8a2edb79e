package backend

import "time"

// Deletes that failed are tried again in the background, by the layer that
// knows what to delete: the client retries the release of a claim it
// handed out (every Backend's Release may be tried again), and a Backend
// the removal of what a failed Acquire may have made (only it knows that:
// the caller got no Claim). Both call Retry, so that a delete is tried
// again the same way wherever it failed: until it succeeds, its lease is
// gone (which removes the claim: the try then counts as done) or its
// owner closes.

// The pauses of a Backoff: the first is MinBackoff, each later one twice
// the last, up to MaxBackoff.
const (
	MinBackoff = 50 * time.Millisecond
	MaxBackoff = time.Second
)

// Backoff paces the tries of one retry loop (see MinBackoff). The zero
// value is ready to use.
type Backoff time.Duration

// Next returns the pause before the next try.
func (b *Backoff) Next() time.Duration {
	d := min(max(2*time.Duration(*b), MinBackoff), MaxBackoff)
	*b = Backoff(d)
	return d
}

// Reset makes the next pause MinBackoff again, after progress.
func (b *Backoff) Reset() { *b = 0 }

// Wait pauses for Next(), or until done is closed; it reports whether the
// pause passed.
func (b *Backoff) Wait(done <-chan struct{}) bool {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// Retry calls try, at once if now and then after each pause of a Backoff,
// until it reports success, and reports whether it did; it gives up once
// done is closed.
func Retry(done <-chan struct{}, now bool, try func() bool) bool {
	if now && try() {
		return true
	}
	var bo Backoff
	for bo.Wait(done) {
		if try() {
			return true
		}
	}
	return false
}
