package fencing_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/ash-lock/ashlock/fencing"
)

// call is one admission, exclusive or shared, and its expected outcome.
type call struct {
	shared bool
	token  uint64
	stale  bool
}

func (c call) do(f *fencing.Fence, resource string) error {
	if c.shared {
		return f.AdmitShared(resource, c.token)
	}
	return f.Admit(resource, c.token)
}

// The rule: Admit(t) needs t >= H and sets E = H = t; AdmitShared(t) needs
// t >= E and raises H to t.
func TestFenceAdmitShared(t *testing.T) {
	tests := []struct {
		name    string
		calls   []call
		highest uint64
	}{
		{"readers never refuse each other", []call{
			{shared: true, token: 9}, {shared: true, token: 7}, {shared: true, token: 8},
		}, 9},
		{"a stale writer is refused after a newer reader", []call{
			{token: 5}, {shared: true, token: 9}, {token: 7, stale: true}, {token: 9},
		}, 9},
		{"a stale reader is refused after a newer writer", []call{
			{shared: true, token: 5}, {token: 8}, {shared: true, token: 7, stale: true}, {shared: true, token: 8},
		}, 8},
		{"a reader older than the newest reader but not the writer", []call{
			{token: 4}, {shared: true, token: 9}, {shared: true, token: 4}, {shared: true, token: 3, stale: true},
		}, 9},
		{"a writer's next request after readers joined", []call{
			{token: 4}, {shared: true, token: 4}, {token: 4},
		}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f fencing.Fence
			for i, c := range tt.calls {
				err := c.do(&f, "r")
				if c.stale {
					var se *fencing.StaleTokenError
					require.ErrorAs(t, err, &se, "call %d %+v", i, c)
					assert.ErrorIs(t, err, fencing.ErrStaleToken)
					assert.Greater(t, se.Highest, c.token, "call %d: the refusal's mark", i)
				} else {
					require.NoError(t, err, "call %d %+v", i, c)
				}
			}
			assert.Equal(t, tt.highest, f.Highest("r"))
		})
	}
}

// Any sequence of admissions on one resource agrees with the rule kept as
// two plain numbers.
func TestFenceAdmitSharedModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var (
			f    fencing.Fence
			e, h uint64
		)
		for i := range rapid.IntRange(1, 50).Draw(t, "n") {
			shared := rapid.Bool().Draw(t, "shared")
			token := rapid.Uint64Range(0, 20).Draw(t, "token")
			var err error
			var ok bool
			if shared {
				err, ok = f.AdmitShared("r", token), token >= e
				if ok {
					h = max(h, token)
				}
			} else {
				err, ok = f.Admit("r", token), token >= h
				if ok {
					e, h = token, token
				}
			}
			if ok != (err == nil) {
				t.Fatalf("call %d: shared=%v token %d with E=%d H=%d: err %v", i, shared, token, e, h, err)
			}
			if err != nil && !errors.Is(err, fencing.ErrStaleToken) {
				t.Fatalf("call %d: %v does not wrap ErrStaleToken", i, err)
			}
			if got := f.Highest("r"); got != h {
				t.Fatalf("call %d: Highest %d, want %d", i, got, h)
			}
		}
	})
}

// Readers and writers at once: once a writer's Admit of t has returned, no
// reader's AdmitShared of a smaller token that starts afterwards succeeds,
// and no writer's Admit of a token below a reader's admitted one does.
// Run it with -race.
func TestFenceAdmitSharedConcurrent(t *testing.T) {
	const (
		writers = 4
		readers = 8
		rounds  = 5000
	)
	var (
		f       fencing.Fence
		next    atomic.Uint64 // tokens handed out
		writerE atomic.Uint64 // highest token whose Admit returned nil
		readerH atomic.Uint64 // highest token whose AdmitShared returned nil
		wg      sync.WaitGroup
	)
	raise := func(a *atomic.Uint64, v uint64) {
		for cur := a.Load(); v > cur && !a.CompareAndSwap(cur, v); cur = a.Load() {
		}
	}
	for range writers {
		wg.Go(func() {
			for range rounds {
				token := next.Add(1)
				settled := readerH.Load()
				err := f.Admit("r", token)
				var se *fencing.StaleTokenError
				switch {
				case err == nil && token < settled:
					t.Errorf("Admit(%d) admitted after AdmitShared(%d) returned", token, settled)
					return
				case err == nil:
					raise(&writerE, token)
				case !errors.As(err, &se) || se.Highest <= token:
					t.Errorf("Admit(%d) refused with %v, want a mark above the token", token, err)
					return
				}
			}
		})
	}
	for range readers {
		wg.Go(func() {
			for range rounds {
				// A reader holds an older token now and then.
				token := next.Load()
				if token > 3 && token%3 == 0 {
					token -= 3
				}
				settled := writerE.Load()
				err := f.AdmitShared("r", token)
				switch {
				case err == nil && token < settled:
					t.Errorf("AdmitShared(%d) admitted after Admit(%d) returned", token, settled)
					return
				case err == nil:
					raise(&readerH, token)
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, max(writerE.Load(), readerH.Load()), f.Highest("r"), "the final mark")
}
