package hlc

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// op is what a node does in one step of a send/receive table.
type op int

const (
	local op = iota // Now, stamp kept locally
	send            // Now, stamp put on the wire
	recv            // Update with the oldest stamp on the wire
)

func (o op) String() string { return [...]string{"local", "send", "recv"}[o] }

// step is one event on one node. Before the event the node's physical
// clock is set to wall. want is the stamp the event produces (for recv, the
// clock's state after Update; for a refused recv, the unchanged state).
type step struct {
	node    string
	wall    int64
	op      op
	want    Timestamp
	refused bool // recv only: Update must fail with ErrMaxOffset
}

// TestClockEvents is the central specification of the clock: named
// scenarios of local, send and receive events across nodes, each with the
// stamp the algorithm must produce.
func TestClockEvents(t *testing.T) {
	const maxOffset = 100 * time.Nanosecond
	scenarios := []struct {
		name  string
		steps []step
	}{
		{
			name: "physical time leads",
			steps: []step{
				{node: "A", wall: 10, op: local, want: ts(10, 0)},
				{node: "A", wall: 11, op: local, want: ts(11, 0)},
				{node: "A", wall: 20, op: send, want: ts(20, 0)},
			},
		},
		{
			name: "logical ticks while physical time stands still",
			steps: []step{
				{node: "A", wall: 10, op: local, want: ts(10, 0)},
				{node: "A", wall: 10, op: local, want: ts(10, 1)},
				{node: "A", wall: 10, op: send, want: ts(10, 2)},
				{node: "A", wall: 11, op: local, want: ts(11, 0)},
			},
		},
		{
			name: "physical clock steps backwards",
			steps: []step{
				{node: "A", wall: 50, op: local, want: ts(50, 0)},
				{node: "A", wall: 40, op: local, want: ts(50, 1)},
				{node: "A", wall: 45, op: local, want: ts(50, 2)},
				{node: "A", wall: 51, op: local, want: ts(51, 0)},
			},
		},
		{
			name: "receive from a node ahead",
			steps: []step{
				{node: "A", wall: 100, op: send, want: ts(100, 0)},
				{node: "B", wall: 50, op: local, want: ts(50, 0)},
				{node: "B", wall: 60, op: recv, want: ts(100, 1)},
				{node: "B", wall: 70, op: local, want: ts(100, 2)},
				{node: "B", wall: 101, op: local, want: ts(101, 0)},
			},
		},
		{
			name: "receive from a node behind",
			steps: []step{
				{node: "A", wall: 10, op: send, want: ts(10, 0)},
				{node: "B", wall: 50, op: local, want: ts(50, 0)},
				{node: "B", wall: 50, op: recv, want: ts(50, 1)},
				{node: "B", wall: 50, op: local, want: ts(50, 2)},
			},
		},
		{
			name: "physical time wins over both stamps",
			steps: []step{
				{node: "A", wall: 10, op: send, want: ts(10, 0)},
				{node: "B", wall: 15, op: local, want: ts(15, 0)},
				{node: "B", wall: 20, op: recv, want: ts(20, 0)},
			},
		},
		{
			name: "equal wall times take the larger logical",
			steps: []step{
				{node: "A", wall: 100, op: local, want: ts(100, 0)},
				{node: "A", wall: 100, op: local, want: ts(100, 1)},
				{node: "A", wall: 100, op: send, want: ts(100, 2)},
				{node: "B", wall: 100, op: local, want: ts(100, 0)},
				{node: "B", wall: 100, op: recv, want: ts(100, 3)},
				{node: "B", wall: 100, op: local, want: ts(100, 4)},
			},
		},
		{
			name: "equal wall times keep the local logical when larger",
			steps: []step{
				{node: "A", wall: 100, op: send, want: ts(100, 0)},
				{node: "B", wall: 100, op: local, want: ts(100, 0)},
				{node: "B", wall: 100, op: local, want: ts(100, 1)},
				{node: "B", wall: 100, op: local, want: ts(100, 2)},
				{node: "B", wall: 99, op: recv, want: ts(100, 3)},
			},
		},
		{
			name: "chain across three nodes",
			steps: []step{
				{node: "A", wall: 300, op: send, want: ts(300, 0)},
				{node: "B", wall: 250, op: recv, want: ts(300, 1)},
				{node: "B", wall: 260, op: send, want: ts(300, 2)},
				{node: "C", wall: 210, op: recv, want: ts(300, 3)},
				{node: "C", wall: 220, op: local, want: ts(300, 4)},
			},
		},
		{
			name: "messages in flight while physical time passes",
			steps: []step{
				{node: "A", wall: 10, op: send, want: ts(10, 0)},
				{node: "A", wall: 20, op: send, want: ts(20, 0)},
				{node: "B", wall: 5, op: local, want: ts(5, 0)},
				// B's physical clock has passed the first stamp but
				// not the second.
				{node: "B", wall: 15, op: recv, want: ts(15, 0)},
				{node: "B", wall: 16, op: recv, want: ts(20, 1)},
			},
		},
		{
			name: "remote too far ahead is refused",
			steps: []step{
				{node: "A", wall: 300, op: send, want: ts(300, 0)},
				{node: "B", wall: 100, op: local, want: ts(100, 0)},
				{node: "B", wall: 150, op: recv, want: ts(100, 0), refused: true},
				{node: "B", wall: 150, op: local, want: ts(150, 0)},
			},
		},
		{
			name: "remote exactly max offset ahead is accepted",
			steps: []step{
				{node: "A", wall: 300, op: send, want: ts(300, 0)},
				{node: "B", wall: 200, op: recv, want: ts(300, 1)},
				{node: "B", wall: 200, op: local, want: ts(300, 2)},
			},
		},
		{
			name: "remote one nanosecond past max offset is refused",
			steps: []step{
				{node: "A", wall: 301, op: send, want: ts(301, 0)},
				{node: "B", wall: 200, op: recv, want: Timestamp{}, refused: true},
				{node: "B", wall: 200, op: local, want: ts(200, 0)},
			},
		},
	}

	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			walls := map[string]*fakeWall{}
			clocks := map[string]*Clock{}
			var wire []Timestamp
			for i, s := range sc.steps {
				if clocks[s.node] == nil {
					walls[s.node] = newFakeWall(0)
					clocks[s.node] = New(walls[s.node], maxOffset)
				}
				walls[s.node].set(s.wall)
				c := clocks[s.node]
				desc := func() string { return s.node + " " + s.op.String() }

				var got Timestamp
				switch s.op {
				case local, send:
					got = c.Now()
					if s.op == send {
						wire = append(wire, got)
					}
				case recv:
					if len(wire) == 0 {
						t.Fatalf("step %d (%s): nothing on the wire", i, desc())
					}
					m := wire[0]
					wire = wire[1:]
					err := c.Update(m)
					if s.refused != errors.Is(err, ErrMaxOffset) {
						t.Errorf("step %d (%s of %v at wall %d): err = %v, want refused=%v",
							i, desc(), m, s.wall, err, s.refused)
					}
					if !s.refused && err != nil {
						t.Errorf("step %d (%s): unexpected error %v", i, desc(), err)
					}
					got = c.last()
				}
				if got != s.want {
					t.Errorf("step %d (%s at wall %d): stamp %v, want %v", i, desc(), s.wall, got, s.want)
				}
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	tests := []struct {
		name      string
		maxOffset time.Duration
		want      time.Duration
	}{
		{name: "zero means default", maxOffset: 0, want: DefaultMaxOffset},
		{name: "negative means default", maxOffset: -time.Second, want: DefaultMaxOffset},
		{name: "positive kept", maxOffset: 2 * time.Second, want: 2 * time.Second},
		{name: "one nanosecond kept", maxOffset: 1, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := New(nil, tt.maxOffset).MaxOffset(); got != tt.want {
				t.Errorf("New(nil, %v).MaxOffset() = %v, want %v", tt.maxOffset, got, tt.want)
			}
		})
	}
}

// TestNilWallUsesSystemClock checks that a Clock built without a WallClock
// stamps with the operating system's wall time.
func TestNilWallUsesSystemClock(t *testing.T) {
	c := New(nil, 0)
	before := time.Now().UnixNano()
	got := c.Now()
	after := time.Now().UnixNano()
	if got.WallTime < before || got.WallTime > after || got.Logical != 0 {
		t.Errorf("first stamp %v, want wall time within [%d, %d] and logical 0", got, before, after)
	}
}

func TestUpdateRefusalError(t *testing.T) {
	wall := newFakeWall(1_000)
	c := New(wall, 100)
	c.Now()
	before := c.last()

	remote := ts(1_101, 7)
	err := c.Update(remote)
	if !errors.Is(err, ErrMaxOffset) {
		t.Fatalf("Update(%v) = %v, want ErrMaxOffset", remote, err)
	}
	var oe *OffsetError
	if !errors.As(err, &oe) {
		t.Fatalf("Update error %T is not an *OffsetError", err)
	}
	if oe.Remote != remote || oe.Physical != 1_000 || oe.MaxOffset != 100 {
		t.Errorf("OffsetError = %+v, want Remote %v, Physical 1000, MaxOffset 100ns", *oe, remote)
	}
	for _, part := range []string{ErrMaxOffset.Error(), "101ns ahead", "max offset 100ns", remote.String()} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not mention %q", err, part)
		}
	}
	if got := c.last(); got != before {
		t.Errorf("refused Update moved the clock from %v to %v", before, got)
	}
}

// TestUpdateExtremeRemote checks the offset check does not overflow when a
// faulty peer sends the largest possible wall time to a clock whose
// physical time is negative.
func TestUpdateExtremeRemote(t *testing.T) {
	c := New(newFakeWall(-1_000), time.Duration(math.MaxInt64))
	err := c.Update(ts(math.MaxInt64, 0))
	if !errors.Is(err, ErrMaxOffset) {
		t.Fatalf("Update(max) = %v, want ErrMaxOffset", err)
	}
	if !strings.Contains(err.Error(), "9223372036854776807ns ahead") {
		t.Errorf("error %q does not report the unsigned distance", err)
	}
}

// TestLogicalCarry checks that an exhausted logical counter carries into
// the wall time instead of wrapping to a smaller stamp.
func TestLogicalCarry(t *testing.T) {
	tests := []struct {
		name   string
		remote Timestamp // merged first with Update
		want   Timestamp // the next Now
	}{
		{name: "local tick", remote: ts(500, math.MaxUint32-1), want: ts(501, 0)},
		{name: "receive tick", remote: ts(500, math.MaxUint32), want: ts(501, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(newFakeWall(450), 100)
			if err := c.Update(tt.remote); err != nil {
				t.Fatalf("Update(%v): %v", tt.remote, err)
			}
			if got := c.last(); !tt.remote.Less(got) {
				t.Fatalf("after Update(%v) clock is %v, not above it", tt.remote, got)
			}
			if got := c.Now(); got != tt.want {
				t.Errorf("Now() = %v, want %v", got, tt.want)
			}
		})
	}
}
