package hlc

import "fmt"

// Timestamp is a hybrid logical clock reading: a wall time in nanoseconds
// since the Unix epoch and a logical counter that orders events sharing a
// wall time. The zero Timestamp is smaller than every stamp a Clock issues.
//
// Timestamp is a small value type; compare with Compare or Less, not ==
// on anything but equality.
type Timestamp struct {
	WallTime int64  // nanoseconds since the Unix epoch
	Logical  uint32 // tie-breaker among stamps with the same WallTime
}

// Compare returns -1 if t < u, 0 if t == u and +1 if t > u, ordering by
// WallTime first and Logical second.
func (t Timestamp) Compare(u Timestamp) int {
	switch {
	case t.WallTime < u.WallTime:
		return -1
	case t.WallTime > u.WallTime:
		return +1
	case t.Logical < u.Logical:
		return -1
	case t.Logical > u.Logical:
		return +1
	}
	return 0
}

// Less reports whether t orders strictly before u.
func (t Timestamp) Less(u Timestamp) bool { return t.Compare(u) < 0 }

// IsZero reports whether t is the zero Timestamp.
func (t Timestamp) IsZero() bool { return t == Timestamp{} }

// String formats t as "<seconds>.<nanoseconds>,<logical>", for example
// "1700000000.000000001,3". A WallTime before the epoch gets a leading
// minus sign: "-0.000000001,0".
func (t Timestamp) String() string {
	sign, wall := "", uint64(t.WallTime)
	if t.WallTime < 0 {
		// Negating in uint64 gives the magnitude even for math.MinInt64.
		sign, wall = "-", -wall
	}
	return fmt.Sprintf("%s%d.%09d,%d", sign, wall/1e9, wall%1e9, t.Logical)
}
