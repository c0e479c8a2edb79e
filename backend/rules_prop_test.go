package backend_test

import (
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/ash-lock/ashlock/backend"
)

// genQueue draws a key's queue: mostly of one kind, as stores keep them,
// sometimes with claims of other kinds mixed in.
func genQueue() *rapid.Generator[[]backend.Kind] {
	kinds := []backend.Kind{x, s, c2, c3}
	return rapid.Custom(func(t *rapid.T) []backend.Kind {
		if rapid.Bool().Draw(t, "mixed") {
			return rapid.SliceOfN(rapid.SampledFrom(kinds), 0, 12).Draw(t, "queue")
		}
		k := rapid.SampledFrom(kinds).Draw(t, "kind")
		if k == x || k == s {
			// Exclusive and shared claims agree on n = 1.
			return rapid.SliceOfN(rapid.SampledFrom([]backend.Kind{x, s}), 0, 12).Draw(t, "queue")
		}
		return slices.Repeat([]backend.Kind{k}, rapid.IntRange(0, 12).Draw(t, "len"))
	})
}

// freeOneByOne applies the rule to each claim of q on its own, from the
// counts of the claims ahead of it, and returns which claims it admits.
func freeOneByOne(q []backend.Kind) []bool {
	free := make([]bool, len(q))
	for i, k := range q {
		nonShared, unlike := 0, false
		for _, o := range q[:i] {
			if !o.Shared {
				nonShared++
			}
			unlike = unlike || o != k
		}
		free[i] = backend.Admits(k, i, nonShared, unlike)
	}
	return free
}

// TestFreePrefixIsTheRuleClaimByClaim: the claims the rule admits, each
// judged alone, are exactly the first FreePrefix claims; so the free
// claims are a prefix without FreePrefix having to stop at the first
// blocked one.
func TestFreePrefixIsTheRuleClaimByClaim(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		q := genQueue().Draw(t, "q")
		n := backend.FreePrefix(q)
		for i, free := range freeOneByOne(q) {
			if free != (i < n) {
				t.Fatalf("claim %d of %v: rule says free=%v, FreePrefix %d", i, q, free, n)
			}
		}
	})
}

// TestFreeClaimStaysFree: when any claim leaves, every other free claim
// stays free, and a claim joining at the back frees nobody less.
func TestFreeClaimStaysFree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		q := genQueue().Draw(t, "q")
		if len(q) == 0 {
			return
		}
		n := backend.FreePrefix(q)
		j := rapid.IntRange(0, len(q)-1).Draw(t, "leaves")
		after := slices.Delete(slices.Clone(q), j, j+1)
		want := n
		if j < n {
			want-- // the claim that left was one of the free ones
		}
		if got := backend.FreePrefix(after); got < want {
			t.Fatalf("%v without claim %d: %d free, was %d", q, j, got, n)
		}
		k := rapid.SampledFrom([]backend.Kind{x, s, c2, c3}).Draw(t, "joins")
		if got := backend.FreePrefix(append(slices.Clone(q), k)); got < n {
			t.Fatalf("%v with %v joining: %d free, was %d", q, k, got, n)
		}
	})
}

// TestOnlyWaitedForDepartureFrees: a claim the rule does not admit stays
// blocked when any claim ahead of it leaves other than those WaitFor
// names, so a store that wakes it only on those misses no wake-up.
func TestOnlyWaitedForDepartureFrees(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		q := genQueue().Draw(t, "q")
		n := backend.FreePrefix(q)
		if n == len(q) {
			return
		}
		i := rapid.IntRange(n, len(q)-1).Draw(t, "waiter")
		w := backend.WaitFor(q, i)
		if w.From < 0 || w.From > w.To || w.To >= i {
			t.Fatalf("WaitFor(%v, %d) = %+v: not claims ahead", q, i, w)
		}
		for j := range i {
			if j >= w.From && j <= w.To {
				continue
			}
			after := slices.Delete(slices.Clone(q), j, j+1)
			if backend.FreePrefix(after) > i-1 {
				t.Fatalf("%v: claim %d is freed by claim %d leaving, but waits for %+v", q, i, j, w)
			}
		}
	})
}

// A claim joining a queue stands on the claims Ahead names as it does on
// the whole queue.
func TestAheadSuffices(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		full := append(genQueue().Draw(t, "queue"), rapid.SampledFrom([]backend.Kind{x, s, c2, c3}).Draw(t, "new"))
		i := len(full) - 1
		n := backend.Ahead(full[i])
		if n == 0 {
			return
		}
		from := max(i-n, 0)
		part := full[from:]
		free := i < backend.FreePrefix(full)
		if (i-from < backend.FreePrefix(part)) != free {
			t.Fatalf("queue %v: free %v on the whole queue, not on its last %d", full, free, len(part))
		}
		if !free {
			w, p := backend.WaitFor(full, i), backend.WaitFor(part, i-from)
			if p != (backend.Wait{From: w.From - from, To: w.To - from, Admission: w.Admission}) {
				t.Fatalf("queue %v: waits for %+v on the whole queue, %+v on its last %d", full, w, p, len(part))
			}
		}
	})
}
