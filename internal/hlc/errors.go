package hlc

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrMaxOffset is the sentinel wrapped by the error Update returns when a
// remote stamp is too far ahead of the local physical clock. Test for it
// with errors.Is; errors.As with *OffsetError gives the details.
var ErrMaxOffset = errors.New("hlc: remote timestamp too far ahead")

// OffsetError describes a remote stamp that Update refused. It wraps
// ErrMaxOffset.
type OffsetError struct {
	Remote    Timestamp     // the refused stamp
	Physical  int64         // local physical time (Unix nanoseconds) when it was checked
	MaxOffset time.Duration // the clock's maximum offset
}

// Error reports by how much the remote stamp exceeded the local clock.
func (e *OffsetError) Error() string {
	// Unsigned arithmetic: the distance between two int64 values may not
	// fit in an int64 when a faulty peer sends an extreme WallTime.
	ahead := fmt.Sprintf("%dns", uint64(e.Remote.WallTime)-uint64(e.Physical))
	if d := uint64(e.Remote.WallTime) - uint64(e.Physical); d <= math.MaxInt64 {
		ahead = time.Duration(d).String()
	}
	return fmt.Sprintf("%v: %s is %s ahead of local physical time (max offset %v)",
		ErrMaxOffset, e.Remote, ahead, e.MaxOffset)
}

// Unwrap returns ErrMaxOffset, so that errors.Is(err, ErrMaxOffset) holds.
func (e *OffsetError) Unwrap() error { return ErrMaxOffset }
