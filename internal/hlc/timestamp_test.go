package hlc

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

func TestTimestampCompare(t *testing.T) {
	tests := []struct {
		name string
		t, u Timestamp
		want int
	}{
		{name: "zero equals zero", want: 0},
		{name: "equal", t: ts(5, 2), u: ts(5, 2), want: 0},
		{name: "wall time decides", t: ts(4, 9), u: ts(5, 0), want: -1},
		{name: "wall time decides reversed", t: ts(5, 0), u: ts(4, 9), want: +1},
		{name: "logical breaks tie", t: ts(5, 1), u: ts(5, 2), want: -1},
		{name: "logical breaks tie reversed", t: ts(5, 2), u: ts(5, 1), want: +1},
		{name: "zero below any stamp", t: Timestamp{}, u: ts(0, 1), want: -1},
		{name: "negative wall time", t: ts(-1, math.MaxUint32), u: ts(0, 0), want: -1},
		{name: "extremes", t: ts(math.MinInt64, 0), u: ts(math.MaxInt64, math.MaxUint32), want: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.t.Compare(tt.u); got != tt.want {
				t.Errorf("%v.Compare(%v) = %d, want %d", tt.t, tt.u, got, tt.want)
			}
			if got, want := tt.t.Less(tt.u), tt.want < 0; got != want {
				t.Errorf("%v.Less(%v) = %v, want %v", tt.t, tt.u, got, want)
			}
		})
	}
}

func TestTimestampIsZero(t *testing.T) {
	tests := []struct {
		name string
		t    Timestamp
		want bool
	}{
		{name: "zero value", t: Timestamp{}, want: true},
		{name: "logical only", t: ts(0, 1), want: false},
		{name: "wall only", t: ts(1, 0), want: false},
		{name: "negative wall", t: ts(-1, 0), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.t.IsZero(); got != tt.want {
				t.Errorf("%#v.IsZero() = %v, want %v", tt.t, got, tt.want)
			}
		})
	}
}

func TestTimestampString(t *testing.T) {
	tests := []struct {
		name string
		t    Timestamp
		want string
	}{
		{name: "zero", t: Timestamp{}, want: "0.000000000,0"},
		{name: "doc example", t: ts(1_700_000_000_000_000_001, 3), want: "1700000000.000000001,3"},
		{name: "whole seconds", t: ts(2e9, 0), want: "2.000000000,0"},
		{name: "sub-second", t: ts(123_456_789, 7), want: "0.123456789,7"},
		{name: "before epoch", t: ts(-1, 0), want: "-0.000000001,0"},
		{name: "before epoch whole", t: ts(-1_500_000_000, 2), want: "-1.500000000,2"},
		{name: "min wall time", t: ts(math.MinInt64, 0), want: "-9223372036.854775808,0"},
		{name: "max stamp", t: ts(math.MaxInt64, math.MaxUint32), want: "9223372036.854775807,4294967295"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.t.String(); got != tt.want {
				t.Errorf("%#v.String() = %q, want %q", tt.t, got, tt.want)
			}
		})
	}
}

func genTimestamp() *rapid.Generator[Timestamp] {
	return rapid.Custom(func(t *rapid.T) Timestamp {
		// Small ranges make ties on WallTime and Logical common.
		return Timestamp{
			WallTime: rapid.OneOf(rapid.Int64Range(-3, 3), rapid.Int64()).Draw(t, "wall"),
			Logical:  rapid.OneOf(rapid.Uint32Range(0, 3), rapid.Uint32()).Draw(t, "logical"),
		}
	})
}

// TestTimestampOrderProperties checks that Compare is a total order that
// agrees with Less, ==, and the lexicographic order on (WallTime, Logical).
func TestTimestampOrderProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genTimestamp().Draw(t, "a")
		b := genTimestamp().Draw(t, "b")
		c := genTimestamp().Draw(t, "c")

		if a.Compare(b) != -b.Compare(a) {
			t.Fatalf("not antisymmetric: %v.Compare(%v)=%d, reverse %d", a, b, a.Compare(b), b.Compare(a))
		}
		if (a.Compare(b) == 0) != (a == b) {
			t.Fatalf("Compare(%v, %v)=%d disagrees with ==", a, b, a.Compare(b))
		}
		if a.Less(b) != (a.Compare(b) < 0) {
			t.Fatalf("Less(%v, %v) disagrees with Compare", a, b)
		}
		lex := a.WallTime < b.WallTime || (a.WallTime == b.WallTime && a.Logical < b.Logical)
		if a.Less(b) != lex {
			t.Fatalf("Less(%v, %v)=%v, lexicographic order says %v", a, b, a.Less(b), lex)
		}
		if a.Less(b) && b.Less(c) && !a.Less(c) {
			t.Fatalf("not transitive: %v < %v < %v but not %v < %v", a, b, c, a, c)
		}
	})
}

// TestTimestampNext checks that next returns the immediate successor: it
// is greater, and nothing lies strictly between.
func TestTimestampNext(t *testing.T) {
	t.Run("carry", func(t *testing.T) {
		if got, want := ts(7, math.MaxUint32).next(), ts(8, 0); got != want {
			t.Errorf("next of exhausted logical = %v, want %v", got, want)
		}
	})
	t.Run("successor property", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			a := genTimestamp().Filter(func(a Timestamp) bool {
				return a != ts(math.MaxInt64, math.MaxUint32)
			}).Draw(t, "a")
			u := genTimestamp().Draw(t, "u")
			n := a.next()
			if !a.Less(n) {
				t.Fatalf("next(%v) = %v is not greater", a, n)
			}
			if a.Less(u) && u.Less(n) {
				t.Fatalf("%v lies between %v and next %v", u, a, n)
			}
		})
	})
}
