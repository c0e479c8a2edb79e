package benchrun_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// adjacentOnce checks that in order, a round of turns among n
// implementations with the wrap from its last turn to its first, every
// implementation is followed by every other exactly once.
func adjacentOnce(t *testing.T, n int, order []int) {
	t.Helper()
	require.Len(t, order, n*(n-1), "turns in %v", order)
	follows := make(map[[2]int]int)
	for i, v := range order {
		w := order[(i+1)%len(order)]
		require.NotEqual(t, v, w, "turn %d of %v follows itself", i, order)
		require.True(t, v >= 0 && v < n, "turn %d of %v is no implementation", i, order)
		follows[[2]int{v, w}]++
	}
	assert.Len(t, follows, n*(n-1), "ordered pairs adjacent in %v", order)
}

func TestTurnOrder(t *testing.T) {
	for n := 2; n <= 6; n++ {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) { adjacentOnce(t, n, benchrun.TurnOrder(n)) })
	}
}

// Drawing the places anew keeps the property the rounds rely on.
func TestShuffledOrder(t *testing.T) {
	for n := 2; n <= 6; n++ {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) { adjacentOnce(t, n, benchrun.ShuffledOrder(n)) })
	}
}

// fakeCycle counts its runs; Count reports the runs since it was called.
type fakeCycle struct {
	runs    *int
	counted *int // runs when Count was called
}

func (c fakeCycle) Run(context.Context) error {
	*c.runs++
	return nil
}

func (c fakeCycle) Count() func(*testing.B, string, float64) {
	*c.counted = *c.runs
	return func(b *testing.B, prefix string, n float64) {
		b.ReportMetric(float64(*c.runs-*c.counted)/n, prefix+"runs/cycle")
	}
}

// Interleave warms every implementation up with one cycle outside the
// count, gives each as many cycles as the others, and reports each one's
// figures under its name, in the order it returns them.
func TestInterleave(t *testing.T) {
	names := []string{"a", "b", "c"}
	runs, counted := make([]int, len(names)), make([]int, len(names))
	impls := make([]benchrun.Impl[fakeCycle], len(names))
	for k, name := range names {
		impls[k] = benchrun.Impl[fakeCycle]{Name: name, Make: func(testing.TB) fakeCycle {
			return fakeCycle{&runs[k], &counted[k]}
		}}
	}
	var perCycle []float64
	res := testing.Benchmark(func(b *testing.B) {
		clear(runs)
		perCycle = benchrun.Interleave(context.Background(), b, impls)
	})
	require.Len(t, perCycle, len(names))
	timed := runs[0] - 1
	require.Positive(t, timed)
	require.Zero(t, timed%((len(names)-1)*benchrun.TurnLength), "cycles %d are not whole rounds", timed)
	for k, name := range names {
		assert.Equal(t, 1, counted[k], "%s: runs before Count", name)
		assert.Equal(t, timed, runs[k]-1, "%s: timed cycles", name)
		assert.Equal(t, 1.0, res.Extra[name+"-runs/cycle"], "%s: what Count reported", name)
		assert.Equal(t, perCycle[k], res.Extra[name+"-ns/cycle"], "%s: ns/cycle", name)
	}
}
