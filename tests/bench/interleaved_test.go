package bench_test

import (
	"math/rand/v2"
	"testing"
	"time"
)

// interleavedRun is how many cycles an implementation runs before the next
// one takes over in BenchmarkUncontendedInterleaved: about 16 ms of work,
// long enough that switching costs little, short enough that the machine's
// slow and fast stretches fall on every implementation alike.
const interleavedRun = 16

// BenchmarkUncontendedInterleaved measures the cycles of
// BenchmarkUncontended against one etcd member in one process, taking
// turns: each implementation runs interleavedRun cycles, then the next.
// One b.Loop iteration is a round of turns in which every implementation
// follows every other one exactly once (see turnOrder), rounds following
// each other without a seam: what one leaves behind for the next (warm
// or cold caches, a timer, garbage) falls on each of the others alike.
// The clients are set up in a random order. Each implementation's time is
// summed over its own turns only.
//
// It reports, per implementation, ns per cycle ("<impl>-ns/cycle") and
// requests per cycle ("<impl>-rpcs/cycle", lease keep-alives excepted), and
// the ratios the targets are about: "ashlock/etcd-mutex" and
// "ashlock/raw-2puts". raw-txn+delete is ashlock's own protocol sent by
// hand (its enqueue Txn, then a Delete): the least any client of that
// protocol can cost, so "raw-txn+delete/raw-2puts" is the protocol's
// floor over two Puts and "ashlock/raw-txn+delete" what the library adds
// on top of its requests. Taken in turns 16 ms apart, the implementations
// share every stretch of the machine's time, so the ratios are measured
// far more closely than from separate runs. ashlock-twin is a second
// ashlock client of its own, measured like the others:
// "ashlock/ashlock-twin" shows how far from 1.0 the method puts two
// identical implementations. ns/op is the time of one round and means
// nothing by itself.
func BenchmarkUncontendedInterleaved(b *testing.B) {
	impls := []namedCycle{
		{"ashlock", ashlockCycle()},
		{"ashlock-twin", ashlockCycle()},
		{"etcd-mutex", mutexCycle},
		{"raw-2puts", rawPutsCycle},
		{"raw-txn+delete", rawCycle(releasePlain)},
	}
	perCycle := interleave(b, impls)
	b.ReportMetric(perCycle[0]/perCycle[1], "ashlock/ashlock-twin")
	b.ReportMetric(perCycle[0]/perCycle[2], "ashlock/etcd-mutex")
	b.ReportMetric(perCycle[0]/perCycle[3], "ashlock/raw-2puts")
	b.ReportMetric(perCycle[0]/perCycle[4], "ashlock/raw-txn+delete")
	b.ReportMetric(perCycle[4]/perCycle[3], "raw-txn+delete/raw-2puts")
}

// turnOrder returns a round of turns among n implementations (n ≥ 2) in
// which, counting the wrap from the last turn back to the first, every
// implementation is followed by every other exactly once: an Eulerian
// circuit of the complete directed graph on n vertices. Each
// implementation has n-1 turns.
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

func TestTurnOrder(t *testing.T) {
	for n := 2; n <= 6; n++ {
		order := turnOrder(n)
		if len(order) != n*(n-1) {
			t.Fatalf("n=%d: %d turns, want %d: %v", n, len(order), n*(n-1), order)
		}
		follows := make(map[[2]int]int)
		for i, v := range order {
			w := order[(i+1)%len(order)]
			if v == w || v < 0 || v >= n {
				t.Fatalf("n=%d: turn %d of %v", n, i, order)
			}
			follows[[2]int{v, w}]++
		}
		if len(follows) != n*(n-1) {
			t.Errorf("n=%d: %d of %d ordered pairs adjacent in %v", n, len(follows), n*(n-1), order)
		}
	}
}

// namedCycle is one implementation of an interleaved benchmark.
type namedCycle struct {
	name string
	mk   cycleMaker
}

// interleave sets up the cycles of impls in a random order, warms each up
// with one cycle, and runs them in turns: each b.Loop iteration is a round of turns of interleavedRun cycles in
// which every implementation follows every other exactly once
// (turnOrder), the places drawn anew in each process. It reports
// "<name>-ns/cycle" and "<name>-rpcs/cycle" for each implementation and
// returns the ns per cycle, in the order of impls.
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
		d := cycles[k].ctr.snapshot().sub(before[k])
		b.ReportMetric(float64(d.requests())/n, im.name+"-rpcs/cycle")
	}
	return perCycle
}
