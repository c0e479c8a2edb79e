package hlc

import (
	"math"
	"sync"
	"time"
)

// DefaultMaxOffset is the maximum offset New uses when given none.
const DefaultMaxOffset = 500 * time.Millisecond

// WallClock is the physical clock a Clock reads. Tests inject a fake one;
// New uses the system clock when given nil. Now must be safe for concurrent
// use. Only its wall reading (UnixNano) is used.
type WallClock interface {
	Now() time.Time
}

// systemClock reads the operating system's wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Clock is a hybrid logical clock. It is safe for concurrent use; its
// methods never block on anything but a short internal mutex.
//
// Create one with New; the zero Clock is not usable. Every stamp a Clock
// issues is above the zero Timestamp, so zero can mean "no stamp"; a
// physical clock set before 1970 therefore leaves stamps at WallTime 0,
// ordered by their logical counter alone.
type Clock struct {
	wall      WallClock
	maxOffset time.Duration

	mu struct {
		sync.Mutex
		// last is the most recent stamp issued or merged. Every later
		// event is stamped strictly above it.
		last Timestamp
	}
}

// New returns a Clock that reads physical time from wall (the system clock
// when wall is nil) and refuses remote stamps more than maxOffset ahead of
// it (DefaultMaxOffset when maxOffset <= 0).
func New(wall WallClock, maxOffset time.Duration) *Clock {
	if wall == nil {
		wall = systemClock{}
	}
	if maxOffset <= 0 {
		maxOffset = DefaultMaxOffset
	}
	return &Clock{wall: wall, maxOffset: maxOffset}
}

// MaxOffset returns the largest amount by which a remote stamp may lead the
// local physical clock and still be accepted by Update.
func (c *Clock) MaxOffset() time.Duration { return c.maxOffset }

// Now stamps a local or send event. Each call returns a Timestamp strictly
// greater than every stamp this Clock returned or merged before, including
// across goroutines, and whose WallTime is at least the physical time read
// during the call.
func (c *Clock) Now() Timestamp {
	// The physical clock is read before taking the lock to keep the
	// critical section short. Two callers may then enter in the opposite
	// order of their readings; the later one finds last ahead of its
	// reading and ticks the logical counter instead, so monotonicity holds.
	pt := c.wall.Now().UnixNano()

	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.mu.last
	if pt > prev.WallTime {
		c.mu.last = Timestamp{WallTime: pt}
	} else {
		c.mu.last = prev.next()
	}
	return c.mu.last
}

// Update merges remote, a stamp received from another process, as a
// receive event: afterwards the Clock is strictly above both remote and
// every stamp it issued before, so the next Now orders after the send that
// produced remote.
//
// If remote.WallTime is more than MaxOffset ahead of the local physical
// clock, Update returns an *OffsetError (wrapping ErrMaxOffset) and leaves
// the Clock unchanged. It is safe for concurrent use.
func (c *Clock) Update(remote Timestamp) error {
	pt := c.wall.Now().UnixNano()
	if remote.WallTime > pt && uint64(remote.WallTime)-uint64(pt) > uint64(c.maxOffset) {
		return &OffsetError{Remote: remote, Physical: pt, MaxOffset: c.maxOffset}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.mu.last
	// The receive rule of the paper: the new WallTime is the largest of the
	// local stamp, the remote stamp and physical time; the logical counter
	// continues from whichever of the two stamps supplied that WallTime
	// (both, when they tie), and restarts when physical time alone wins.
	switch l := max(prev.WallTime, remote.WallTime, pt); {
	case l == prev.WallTime && l == remote.WallTime:
		c.mu.last = Timestamp{WallTime: l, Logical: max(prev.Logical, remote.Logical)}.next()
	case l == prev.WallTime:
		c.mu.last = prev.next()
	case l == remote.WallTime:
		c.mu.last = remote.next()
	default:
		c.mu.last = Timestamp{WallTime: l}
	}
	return nil
}

// next returns the smallest Timestamp greater than t at the same WallTime,
// or, when the logical counter is exhausted, the first one at the next
// nanosecond. Carrying into WallTime keeps stamps strictly increasing; it
// can only happen when four billion events share one wall nanosecond, and
// moves the clock ahead of physical time by a single nanosecond.
func (t Timestamp) next() Timestamp {
	if t.Logical == math.MaxUint32 {
		return Timestamp{WallTime: t.WallTime + 1}
	}
	return Timestamp{WallTime: t.WallTime, Logical: t.Logical + 1}
}
