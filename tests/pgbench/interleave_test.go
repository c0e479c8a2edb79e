package pgbench_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// turnOrder returns a round of turns among n implementations (n ≥ 2) in
// which, counting the wrap from the last turn back to the first, every
// implementation is followed by every other exactly once: an Eulerian
// circuit of the complete directed graph on n vertices (the same order as
// tests/bench's). Each implementation has n-1 turns.
func turnOrder(n int) []int {
	next := make([]int, n)
	for v := range next {
		next[v] = (v + 1) % n
	}
	used := make([]int, n)
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
	circuit = circuit[:len(circuit)-1]
	for i, j := 0, len(circuit)-1; i < j; i, j = i+1, j-1 {
		circuit[i], circuit[j] = circuit[j], circuit[i]
	}
	return circuit
}

// shuffledOrder is turnOrder(n) with the implementations' places drawn at
// random, anew in each process.
func shuffledOrder(n int) []int {
	label := rand.Perm(n)
	order := turnOrder(n)
	for i, v := range order {
		order[i] = label[v]
	}
	return order
}

// interleavedRun is how many cycles an uncontended implementation runs
// before the next takes over: a few milliseconds of work, long enough that
// switching costs little, short enough that the machine's slow and fast
// stretches fall on every implementation alike.
const interleavedRun = 16

// cycle is one implementation's take and give-back of a free lock; ctr
// counts what it sends.
type cycle struct {
	ctr *counter
	run func(context.Context) error
}

// namedCycle is one implementation of an interleaved benchmark; mk sets
// its cycle up on connections of its own, closed in b.Cleanup.
type namedCycle struct {
	name string
	mk   func(testing.TB) cycle
}

// interleave sets up the cycles of impls in a random order, warms each up
// with one cycle, and runs them in turns: each b.Loop iteration is a round
// of turns of interleavedRun cycles in which every implementation follows
// every other exactly once. It reports "<name>-ns/cycle",
// "<name>-stmts/cycle" and "<name>-roundtrips/cycle" for each and returns
// the ns per cycle, in the order of impls.
func interleave(b *testing.B, impls []namedCycle) []float64 {
	cycles := make([]cycle, len(impls))
	ctx := runCtx(b)
	for _, k := range rand.Perm(len(impls)) {
		cycles[k] = impls[k].mk(b)
		if err := cycles[k].run(ctx); err != nil {
			b.Fatalf("%s: %v", impls[k].name, err)
		}
	}
	order := shuffledOrder(len(impls))
	before := make([]counts, len(impls))
	for k := range cycles {
		before[k] = cycles[k].ctr.snapshot()
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
		reportCounts(b, im.name+"-", cycles[k].ctr.snapshot().sub(before[k]), n, "cycle")
	}
	return perCycle
}
