package memory

import (
	"slices"
	"sort"
	"sync"
	"time"
)

// ManualClock is a Clock that moves only when Advance is called, for tests
// that cannot use testing/synctest (Examples, or tests that need to stop time
// at an exact instant). The zero value is not usable; create one with
// NewManualClock. All methods are safe for concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
	// timers are the pending timers in the order they fall due, those due
	// at the same instant in the order they were scheduled.
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
	t := &manualTimer{clock: c, due: c.now.Add(d), f: f}
	i := sort.Search(len(c.timers), func(i int) bool { return c.timers[i].due.After(t.due) })
	c.timers = slices.Insert(c.timers, i, t)
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
	for len(c.timers) > 0 && !c.timers[0].due.After(target) {
		next := c.timers[0]
		c.timers = slices.Delete(c.timers, 0, 1)
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

// manualTimer is one call scheduled on a ManualClock.
type manualTimer struct {
	clock *ManualClock
	due   time.Time
	f     func()
}

// Stop cancels the timer if it is still pending and reports whether it was.
func (t *manualTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.timers, t)
	if i >= 0 {
		c.timers = slices.Delete(c.timers, i, i+1)
	}
	return i >= 0
}
