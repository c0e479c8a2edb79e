package memory

import (
	"sync"
	"time"
)

// ManualClock is a Clock that moves only when Advance is called, for tests
// that cannot use testing/synctest (Examples, or tests that need to stop time
// at an exact instant). The zero value is not usable; create one with
// NewManualClock. All methods are safe for concurrent use.
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64 // orders timers that fall due at the same instant
	timers []*manualTimer
}

// NewManualClock returns a ManualClock that reads start until advanced.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start}
}

// Now returns the clock's current time. It does not block.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run once the clock has been advanced by at least
// d from now. f runs on the goroutine that calls Advance, never inside
// AfterFunc itself: a d <= 0 runs at the next Advance, even Advance(0).
func (c *ManualClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &manualTimer{clock: c, due: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock forward by d (a negative d counts as zero) and runs
// every timer that falls due, earliest first, on the calling goroutine.
// While a timer's function runs, Now reads the instant it fell due; when
// Advance returns, Now reads the old time plus d. Timers scheduled by those
// functions run too if they fall due within the same span. Advance blocks
// until every due function has returned; calls to Advance from several
// goroutines run their timers interleaved but each exactly once.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now
	if d > 0 {
		target = target.Add(d)
	}
	for {
		next := c.popDueLocked(target)
		if next == nil {
			break
		}
		if next.due.After(c.now) {
			c.now = next.due
		}
		// Run f without the clock's lock: it may call Now or AfterFunc, or
		// take the Backend's mutex, which in turn calls into this clock.
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
	}
	if target.After(c.now) {
		c.now = target
	}
	c.mu.Unlock()
}

// popDueLocked removes and returns the earliest timer due at or before
// target, or nil if none is.
func (c *ManualClock) popDueLocked(target time.Time) *manualTimer {
	best := -1
	for i, t := range c.timers {
		if t.due.After(target) {
			continue
		}
		if best < 0 || t.due.Before(c.timers[best].due) ||
			(t.due.Equal(c.timers[best].due) && t.seq < c.timers[best].seq) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	t := c.timers[best]
	c.timers = append(c.timers[:best], c.timers[best+1:]...)
	return t
}

// manualTimer is one call scheduled on a ManualClock.
type manualTimer struct {
	clock *ManualClock
	due   time.Time
	seq   uint64
	f     func()
}

// Stop cancels the timer if it is still pending and reports whether it was.
func (t *manualTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, u := range c.timers {
		if u == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}
