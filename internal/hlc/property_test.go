package hlc

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// node is one process in the property test: a clock on its own physical
// clock, plus what the test knows about its history.
type node struct {
	wall  *fakeWall
	clock *Clock
	// last is the stamp of the node's latest event.
	last Timestamp
	// past is the largest stamp of any event that happened before the
	// node's next event (its own earlier events and, through received
	// messages, other nodes' events). The next stamp must exceed it.
	past Timestamp
}

// message is a stamp in flight.
type message struct {
	to    int
	stamp Timestamp
}

// TestClockProperties drives several nodes through random local, send,
// receive and clock-advance events and checks, after every event:
//   - each node's stamps strictly increase;
//   - happened-before implies a smaller stamp (an event's stamp exceeds
//     every stamp in its causal past);
//   - a stamp's WallTime is at least the physical time it was issued at
//     and at most MaxOffset above it;
//   - a remote stamp more than MaxOffset ahead is refused and leaves the
//     clock unchanged; any other is merged.
func TestClockProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// A small offset relative to the clock advances makes refusals,
		// ties on WallTime and logical ticks all common.
		maxOffset := time.Duration(rapid.Int64Range(1, 50).Draw(t, "maxOffset"))
		nodes := make([]*node, rapid.IntRange(2, 4).Draw(t, "nodes"))
		for i := range nodes {
			// Non-negative: a Clock never stamps below zero (see Clock).
			start := rapid.Int64Range(0, 100).Draw(t, fmt.Sprintf("start%d", i))
			w := newFakeWall(start)
			nodes[i] = &node{wall: w, clock: New(w, maxOffset)}
		}
		var wire []message
		pick := func(t *rapid.T, label string) (int, *node) {
			i := rapid.IntRange(0, len(nodes)-1).Draw(t, label)
			return i, nodes[i]
		}

		// event stamps one local or send event on n and checks it.
		event := func(t *rapid.T, n *node) Timestamp {
			pt := n.wall.get()
			s := n.clock.Now()
			if !n.last.Less(s) && !(n.last.IsZero() && s.IsZero()) {
				t.Fatalf("stamp %v does not exceed previous %v", s, n.last)
			}
			if !n.past.Less(s) && !n.past.IsZero() {
				t.Fatalf("stamp %v does not exceed causal past %v", s, n.past)
			}
			checkBounds(t, s, pt, maxOffset)
			n.last, n.past = s, s
			return s
		}

		t.Repeat(map[string]func(*rapid.T){
			"advance": func(t *rapid.T) {
				_, n := pick(t, "node")
				n.wall.set(n.wall.get() + rapid.Int64Range(0, 3*int64(maxOffset)).Draw(t, "by"))
			},
			"local": func(t *rapid.T) {
				_, n := pick(t, "node")
				event(t, n)
			},
			"send": func(t *rapid.T) {
				from, n := pick(t, "from")
				to := rapid.IntRange(0, len(nodes)-1).
					Filter(func(i int) bool { return i != from }).Draw(t, "to")
				wire = append(wire, message{to: to, stamp: event(t, n)})
			},
			"receive": func(t *rapid.T) {
				if len(wire) == 0 {
					t.Skip("nothing in flight")
				}
				// Any message may arrive next: the network reorders.
				i := rapid.IntRange(0, len(wire)-1).Draw(t, "message")
				m := wire[i]
				wire = append(wire[:i], wire[i+1:]...)
				n := nodes[m.to]

				pt := n.wall.get()
				before := n.clock.last()
				err := n.clock.Update(m.stamp)
				after := n.clock.last()
				if m.stamp.WallTime-pt > int64(maxOffset) {
					if !errors.Is(err, ErrMaxOffset) {
						t.Fatalf("Update(%v) at physical %d = %v, want ErrMaxOffset", m.stamp, pt, err)
					}
					if after != before {
						t.Fatalf("refused Update(%v) moved the clock from %v to %v", m.stamp, before, after)
					}
					return
				}
				if err != nil {
					t.Fatalf("Update(%v) at physical %d: %v", m.stamp, pt, err)
				}
				if !before.Less(after) || !m.stamp.Less(after) {
					t.Fatalf("after Update(%v) clock is %v, want above both it and %v", m.stamp, after, before)
				}
				if !n.past.Less(after) && !n.past.IsZero() {
					t.Fatalf("receive stamp %v does not exceed causal past %v", after, n.past)
				}
				checkBounds(t, after, pt, maxOffset)
				// The receive is an event: everything before the send is
				// now in this node's past.
				n.last, n.past = after, after
			},
		})
	})
}

// checkBounds checks the paper's bound: pt <= s.WallTime <= pt + maxOffset.
func checkBounds(t *rapid.T, s Timestamp, pt int64, maxOffset time.Duration) {
	t.Helper()
	if s.WallTime < pt {
		t.Fatalf("stamp %v is below physical time %d", s, pt)
	}
	if s.WallTime-pt > int64(maxOffset) {
		t.Fatalf("stamp %v is %dns above physical time %d, max offset %v", s, s.WallTime-pt, pt, maxOffset)
	}
}
