package redisbench_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// interleavedRun is how many cycles an implementation runs before the next
// one takes over: long enough that switching costs little, short enough
// that the machine's slow and fast stretches fall on every implementation
// alike.
const interleavedRun = 16

// cycle is one implementation of an uncontended Acquire+Unlock, with the
// counter of the client it talks through.
type cycle struct {
	run func(ctx context.Context) error
	ctr *counter
}

// namedCycle is one implementation of an interleaved benchmark; mk sets it
// up (its clients are closed in b.Cleanup).
type namedCycle struct {
	name string
	mk   func(b *testing.B) cycle
}

// interleave sets up the cycles of impls in a random order, warms each up
// with one cycle, and runs them in turns: each b.Loop iteration is a round
// of turns of interleavedRun cycles in which every implementation follows
// every other exactly once (turnOrder), the places drawn anew in each
// process. It reports "<name>-ns/cycle" and "<name>-reqs/cycle" (commands
// sent) for each implementation and returns the ns per cycle, in the order
// of impls.
func interleave(b *testing.B, impls []namedCycle) []float64 {
	cycles := make([]cycle, len(impls))
	ctx := runCtx(b)
	for _, k := range rand.Perm(len(impls)) {
		cycles[k] = impls[k].mk(b)
		if err := cycles[k].run(ctx); err != nil {
			b.Fatalf("%s: %v", impls[k].name, err)
		}
	}
	label := rand.Perm(len(impls))
	order := turnOrder(len(impls))
	for i, v := range order {
		order[i] = label[v]
	}
	before := make([]int64, len(impls))
	for k := range cycles {
		before[k] = cycles[k].ctr.requests()
	}
	spent := make([]time.Duration, len(impls))
	rounds := 0
	for b.Loop() {
		for _, k := range order {
			start := time.Now()
			for range interleavedRun {
				if err := cycles[k].run(ctx); err != nil {
					b.Fatalf("%s: %v", impls[k].name, err)
				}
			}
			spent[k] += time.Since(start)
		}
		rounds++
	}
	n := float64(rounds * (len(impls) - 1) * interleavedRun)
	perCycle := make([]float64, len(impls))
	for k, im := range impls {
		perCycle[k] = float64(spent[k].Nanoseconds()) / n
		b.ReportMetric(perCycle[k], im.name+"-ns/cycle")
		b.ReportMetric(float64(cycles[k].ctr.requests()-before[k])/n, im.name+"-reqs/cycle")
	}
	return perCycle
}

// turnOrder returns a round of turns among n implementations (n ≥ 2) in
// which, counting the wrap from the last turn back to the first, every
// implementation is followed by every other exactly once: an Eulerian
// circuit of the complete directed graph on n vertices. Each
// implementation has n-1 turns. (The same as tests/bench's, tested there.)
func turnOrder(n int) []int {
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
