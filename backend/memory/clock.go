package memory

import (
	"slices"
	"sort"
	"sync"
	"time"
)

// Clock is the time source of a Backend: it reads the time for
// Claim.AcquiredAt and schedules lease expiries and delayed renewals. Inject
// one with WithClock to drive TTLs from a test.
//
// Implementations must be safe for concurrent use. The Backend calls Now,
// AfterFunc and Timer.Stop while holding its own mutex, so they must not call
// back into the Backend and must not block. The functions passed to AfterFunc
// may call into the Backend: they must be run without any lock of the clock
// held.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc arranges for f to be called, on a goroutine other than the
	// caller's, once d has elapsed, and returns a Timer that can cancel the
	// call. It does not block.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer cancels a call scheduled with Clock.AfterFunc. *time.Timer
// satisfies it.
type Timer interface {
	// Stop prevents the scheduled call if it has not started yet and
	// reports whether it did so. It does not wait for a call that has
	// already started.
	Stop() bool
}

// realClock is the default Clock: the time package. Inside a
// testing/synctest bubble the time package runs on the bubble's fake clock,
// so a Backend created inside a bubble gets fake time without WithClock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

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
