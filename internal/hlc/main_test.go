package hlc

import (
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeWall is a WallClock that reads a settable number of Unix nanoseconds.
type fakeWall struct{ nanos atomic.Int64 }

func newFakeWall(nanos int64) *fakeWall {
	w := &fakeWall{}
	w.nanos.Store(nanos)
	return w
}

func (w *fakeWall) Now() time.Time  { return time.Unix(0, w.nanos.Load()) }
func (w *fakeWall) set(nanos int64) { w.nanos.Store(nanos) }
func (w *fakeWall) get() int64      { return w.nanos.Load() }

// last reads the clock's latest stamp without issuing a new one.
func (c *Clock) last() Timestamp {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.last
}

// ts is shorthand for a Timestamp literal in tables.
func ts(wall int64, logical uint32) Timestamp {
	return Timestamp{WallTime: wall, Logical: logical}
}
