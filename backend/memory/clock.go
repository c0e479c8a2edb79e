package memory

import "time"

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
