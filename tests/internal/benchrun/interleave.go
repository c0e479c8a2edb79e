// Package benchrun holds what the benchmark packages of this module
// (bench for etcd, pgbench for PostgreSQL, redisbench for Redis) share:
// running implementations in interleaved turns, taking a lock as a
// contender does, and reporting latencies. What an implementation does
// and what its clients send are the benchmarks' own; they pass them in.
package benchrun

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TurnLength is how many cycles an implementation runs in one turn of
// Interleave: long enough that switching costs little, short enough that
// the machine's slow and fast stretches fall on every implementation
// alike.
const TurnLength = 16

// Cycle is one implementation's cycle of an interleaved benchmark, set up
// on clients of its own.
type Cycle interface {
	// Run runs one cycle.
	Run(ctx context.Context) error
	// Count starts counting what the cycle's clients send and returns the
	// function that reports, under prefix (the implementation's name and
	// "-"), what they sent since, per cycle over n cycles.
	Count() (report func(b *testing.B, prefix string, n float64))
}

// Impl is one implementation of an interleaved benchmark: Make sets its
// cycle up, on clients closed in tb.Cleanup.
type Impl[C Cycle] struct {
	Name string
	Make func(tb testing.TB) C
}

// Interleave sets up the cycles of impls in a random order, warms each up
// with one cycle, and runs them in turns of TurnLength cycles (see
// Rounds). It reports "<name>-ns/cycle" for each implementation, the time
// of its own turns only, and what its Count reports, and returns the ns
// per cycle, in the order of impls. Setup, warm-up and counting are not
// timed.
func Interleave[C Cycle](ctx context.Context, b *testing.B, impls []Impl[C]) []float64 {
	cycles := make([]C, len(impls))
	for _, k := range rand.Perm(len(impls)) {
		cycles[k] = impls[k].Make(b)
		if err := cycles[k].Run(ctx); err != nil {
			b.Fatalf("%s: %v", impls[k].Name, err)
		}
	}
	reports := make([]func(*testing.B, string, float64), len(impls))
	for k, c := range cycles {
		reports[k] = c.Count()
	}
	n, perCycle := Rounds(b, len(impls), TurnLength, func(k int) (time.Duration, error) {
		start := time.Now()
		for range TurnLength {
			if err := cycles[k].Run(ctx); err != nil {
				return 0, fmt.Errorf("%s: %w", impls[k].Name, err)
			}
		}
		return time.Since(start), nil
	})
	for k, im := range impls {
		b.ReportMetric(perCycle[k], im.Name+"-ns/cycle")
		reports[k](b, im.Name+"-", n)
	}
	return perCycle
}

// Rounds runs n implementations (n ≥ 2) in turns until b.Loop is done.
// Each b.Loop iteration is a round of ShuffledOrder(n), rounds following
// each other without a seam: what one turn leaves behind for the next
// (warm or cold caches, a timer, garbage) falls on each implementation
// alike. turn(k) runs one turn of implementation k, perTurn units of work
// (cycles, handoffs), and returns its time; an error fails b. Rounds
// returns how many units each implementation ran (the same for all) and
// each one's ns per unit, the time of its own turns only, in the order of
// k.
func Rounds(b *testing.B, n, perTurn int, turn func(k int) (time.Duration, error)) (units float64, nsPerUnit []float64) {
	order := ShuffledOrder(n)
	spent := make([]time.Duration, n)
	rounds := 0
	for b.Loop() {
		for _, k := range order {
			d, err := turn(k)
			if err != nil {
				b.Fatal(err)
			}
			spent[k] += d
		}
		rounds++
	}
	units = float64(rounds * (n - 1) * perTurn)
	nsPerUnit = make([]float64, n)
	for k := range spent {
		nsPerUnit[k] = float64(spent[k].Nanoseconds()) / units
	}
	return units, nsPerUnit
}

// ShuffledOrder is TurnOrder(n) with the implementations' places drawn at
// random, anew in each process.
func ShuffledOrder(n int) []int {
	label := rand.Perm(n)
	order := TurnOrder(n)
	for i, v := range order {
		order[i] = label[v]
	}
	return order
}

// TurnOrder returns a round of turns among n implementations (n ≥ 2) in
// which, counting the wrap from the last turn back to the first, every
// implementation is followed by every other exactly once: an Eulerian
// circuit of the complete directed graph on n vertices. Each
// implementation has n-1 turns.
func TurnOrder(n int) []int {
	// Hierholzer's algorithm; next[v] is the next unused edge out of v
	// (v -> next[v], skipping v itself).
	next := make([]int, n)
	for v := range next {
		next[v] = (v + 1) % n
	}
	used := make([]int, n) // edges used out of each vertex
	var circuit []int
	stack := []int{0}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		if used[v] == n-1 {
			circuit = append(circuit, v)
			stack = stack[:len(stack)-1]
			continue
		}
		w := next[v]
		next[v] = (w + 1) % n
		if next[v] == v {
			next[v] = (v + 1) % n
		}
		used[v]++
		stack = append(stack, w)
	}
	// circuit is the tour reversed, ending where it began: drop the
	// repeated start and reverse.
	circuit = circuit[:len(circuit)-1]
	for i, j := 0, len(circuit)-1; i < j; i, j = i+1, j-1 {
		circuit[i], circuit[j] = circuit[j], circuit[i]
	}
	return circuit
}
