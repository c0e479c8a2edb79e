package backend_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// The kinds the tables use: exclusive, shared, and counted with 2 and 3
// permits.
var (
	x  = backend.Kind{Permits: 1}
	s  = backend.Kind{Shared: true, Permits: 1}
	c2 = backend.Kind{Permits: 2}
	c3 = backend.Kind{Permits: 3}
)

func q(kinds ...backend.Kind) []backend.Kind { return kinds }

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  backend.AcquireRequest
		want backend.Kind
	}{
		{"zero permits read as one", backend.AcquireRequest{}, x},
		{"one permit", backend.AcquireRequest{Permits: 1}, x},
		{"shared", backend.AcquireRequest{Shared: true}, s},
		{"counted", backend.AcquireRequest{Permits: 3}, c3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := backend.KindOf(&tc.req)
			assert.Equal(t, tc.want, k)
			assert.Equal(t, tc.want == x, k.Exclusive())
			assert.Equal(t, tc.want == c3, k.Counted())
		})
	}
}

func TestAdmits(t *testing.T) {
	for _, tc := range []struct {
		name             string
		k                backend.Kind
		ahead, nonShared int
		unlike           bool
		want             bool
	}{
		{"exclusive at the head", x, 0, 0, false, true},
		{"exclusive behind one", x, 1, 1, false, false},
		{"exclusive behind readers", x, 2, 0, true, false},
		{"shared at the head", s, 0, 0, false, true},
		{"shared behind readers", s, 3, 0, false, true},
		{"shared behind a writer", s, 1, 1, true, false},
		{"shared behind readers and a writer", s, 3, 1, true, false},
		{"counted at the head", c3, 0, 0, false, true},
		{"counted with n-1 ahead", c3, 2, 2, false, true},
		{"counted with n ahead", c3, 3, 3, false, false},
		{"counted with more than n ahead", c3, 5, 5, false, false},
		{"counted behind a claim of another kind", c3, 1, 1, true, false},
		{"counted behind readers", c3, 2, 0, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, backend.Admits(tc.k, tc.ahead, tc.nonShared, tc.unlike))
		})
	}
}

// A kind holds alone exactly when no queue admits it behind another
// claim.
func TestHoldsAlone(t *testing.T) {
	kinds := []backend.Kind{x, s, c2, c3}
	for _, k := range kinds {
		admittedBehindOne := false
		for _, ahead := range kinds {
			if backend.FreePrefix(q(ahead, k)) == 2 {
				admittedBehindOne = true
			}
		}
		assert.Equal(t, !admittedBehindOne, backend.HoldsAlone(k), "%+v", k)
	}
	assert.True(t, backend.HoldsAlone(x))
	assert.False(t, backend.HoldsAlone(s))
	assert.False(t, backend.HoldsAlone(c3))
}

func TestFreePrefix(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue []backend.Kind
		want  int
	}{
		{"empty", nil, 0},
		{"one exclusive", q(x), 1},
		{"exclusive queue", q(x, x, x), 1},
		{"run of readers", q(s, s, s), 3},
		{"readers up to a writer", q(s, s, x, s, s), 2},
		{"writer ahead of readers", q(x, s, s), 1},
		{"counted below n", q(c3, c3), 2},
		{"counted at n", q(c3, c3, c3), 3},
		{"counted past n", q(c3, c3, c3, c3, c3), 3},
		{"counted behind an exclusive claim", q(x, c3, c3), 1},
		{"counted behind readers", q(s, s, c3), 2},
		{"counted behind another count", q(c2, c3, c3), 1},
		{"counted of one count behind another", q(c3, c3, c2), 2},
		{"reader behind counted", q(c3, s), 1},
		{"exclusive behind counted", q(c3, x), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, backend.FreePrefix(tc.queue))
		})
	}
}

func TestWaitFor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue []backend.Kind
		i     int
		want  backend.Wait
	}{
		{"exclusive waits for the claim just ahead", q(x, x, x), 2, backend.Wait{From: 1, To: 1}},
		{"exclusive behind readers waits for the newest", q(s, s, x), 2, backend.Wait{From: 1, To: 1}},
		{"reader waits for the writer ahead", q(x, s), 1, backend.Wait{From: 0, To: 0}},
		{"readers behind a writer all wait for it", q(s, x, s, s), 3, backend.Wait{From: 1, To: 1}},
		{"reader waits for the newest of two writers", q(x, s, x, s), 3, backend.Wait{From: 2, To: 2}},
		{"writer between readers waits for the reader ahead", q(s, s, x), 2, backend.Wait{From: 1, To: 1}},
		{"first counted waiter waits for any holder", q(c3, c3, c3, c3), 3, backend.Wait{From: 0, To: 2}},
		{"second counted waiter waits for the first", q(c3, c3, c3, c3, c3), 4, backend.Wait{From: 3, To: 3, Admission: true}},
		{"later counted waiter waits for the one ahead", q(c2, c2, c2, c2, c2), 4, backend.Wait{From: 3, To: 3, Admission: true}},
		{"counted behind an exclusive claim waits for it", q(x, c3), 1, backend.Wait{From: 0, To: 0}},
		{"counted behind readers waits for the newest", q(s, s, c3, c3), 3, backend.Wait{From: 1, To: 1}},
		{"counted behind another count waits for the newest such", q(c2, c3, c3, c3, c3), 4, backend.Wait{From: 0, To: 0}},
		{"counted behind a mixed head waits for the unlike claim", q(c3, c2, c3), 2, backend.Wait{From: 1, To: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.GreaterOrEqual(t, tc.i, backend.FreePrefix(tc.queue), "the table asks about a free claim")
			assert.Equal(t, tc.want, backend.WaitFor(tc.queue, tc.i))
		})
	}
}

func TestPermitFor(t *testing.T) {
	const none = backend.NoPermit
	for _, tc := range []struct {
		name            string
		permits         []int
		n, i            int
		permit, waitFor int
	}{
		{"first holder takes 0", []int{none}, 3, 0, 0, -1},
		{"next holder takes the next", []int{0, none}, 3, 1, 1, -1},
		{"lowest free after a gap", []int{2, 0, none}, 3, 2, 1, -1},
		{"reuses a permit left free", []int{1, none}, 2, 1, 0, -1},
		{"waits for an older claim to record", []int{0, none, none}, 3, 2, none, 1},
		{"waits for the oldest unrecorded", []int{none, none}, 3, 1, none, 0},
		{"ignores claims behind", []int{1, none, 0}, 3, 1, 0, -1},
		{"past the first word", func() []int {
			p := make([]int, 70)
			for j := range 69 {
				p[j] = j
			}
			p[69] = none
			return p
		}(), 100, 69, 69, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			permit, waitFor := backend.PermitFor(tc.permits, tc.n, tc.i)
			assert.Equal(t, tc.permit, permit, "permit")
			assert.Equal(t, tc.waitFor, waitFor, "waitFor")
		})
	}
}

func TestPermitSet(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   []int
		clear []int
		n     int
		want  int
	}{
		{"empty", nil, nil, 3, 0},
		{"lowest gap", []int{0, 1, 3}, nil, 5, 2},
		{"all n taken", []int{0, 1, 2}, nil, 3, backend.NoPermit},
		{"taken beyond n do not count", []int{0, 1, 2, 5}, nil, 4, 3},
		{"cleared permit is free again", []int{0, 1, 2}, []int{1}, 3, 1},
		{"n of zero", nil, nil, 0, backend.NoPermit},
		{"full first word", seq(0, 64), nil, 65, 64},
		{"full first word, n 64", seq(0, 64), nil, 64, backend.NoPermit},
		{"last permit of the model", seq(0, backend.MaxPermits-1), nil, backend.MaxPermits, backend.MaxPermits - 1},
		{"every permit of the model", seq(0, backend.MaxPermits), nil, backend.MaxPermits, backend.NoPermit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ps backend.PermitSet
			for _, p := range tc.set {
				ps.Set(p)
			}
			for _, p := range tc.clear {
				ps.Clear(p)
			}
			assert.Equal(t, tc.want, ps.Lowest(tc.n))
		})
	}
}

// seq returns from, from+1, ..., to-1.
func seq(from, to int) []int {
	var out []int
	for p := from; p < to; p++ {
		out = append(out, p)
	}
	return out
}
