package memory_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

func stampWith(r backend.AcquireRequest, f func(prev backend.Timestamp) (backend.Timestamp, error)) backend.AcquireRequest {
	r.Stamp = f
	return r
}

func TestStampKeepsTheHighest(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	steps := []struct {
		owner    string
		returns  int64
		wantPrev int64
	}{
		{"first", 100, 0},
		{"second", 200, 100},
		{"backwards", 50, 200}, // a caller's stamp below the record does not lower it
		{"after backwards", 300, 200},
	}
	for _, s := range steps {
		var prev backend.Timestamp
		r := stampWith(request("k", l, s.owner), func(p backend.Timestamp) (backend.Timestamp, error) {
			prev = p
			return backend.Timestamp{WallTime: s.returns}, nil
		})
		c := mustAcquire(t, b, r)
		if prev.WallTime != s.wantPrev {
			t.Errorf("%s: Stamp given %v, want wall time %d", s.owner, prev, s.wantPrev)
		}
		if c.Stamp.WallTime != s.returns {
			t.Errorf("%s: claim stamp %v, want what Stamp returned (%d)", s.owner, c.Stamp, s.returns)
		}
		mustRelease(t, b, c)
	}
}

// Stamp runs without the Backend's mutex, so it may call the Backend.
func TestStampRunsOutsideTheMutex(t *testing.T) {
	b := newBackend(t)
	l := grant(t, b, time.Hour)
	r := stampWith(request("k", l, "A"), func(prev backend.Timestamp) (backend.Timestamp, error) {
		info, err := b.Inspect(t.Context(), "k")
		if err != nil || !info.Held {
			t.Errorf("Inspect from inside Stamp: %+v, %v; want the key held", info, err)
		}
		return backend.Timestamp{WallTime: 1}, nil
	})
	done := start(t.Context(), b, r)
	if _, err := done.wait(t); err != nil {
		t.Fatal(err)
	}
}

func TestFailedStampHandsTheKeyOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		l := grant(t, b, time.Hour)
		h := mustAcquire(t, b, request("k", l, "H"))
		refused := errors.New("clock too far ahead")
		bad := start(t.Context(), b, stampWith(request("k", l, "bad"), func(backend.Timestamp) (backend.Timestamp, error) {
			return backend.Timestamp{}, refused
		}))
		synctest.Wait()
		good := start(t.Context(), b, request("k", l, "good"))
		synctest.Wait()
		mustRelease(t, b, h)
		if _, err := bad.wait(t); !errors.Is(err, refused) {
			t.Errorf("Acquire with a failing Stamp: %v, want the stamp's error", err)
		}
		c, err := good.wait(t)
		if err != nil {
			t.Fatalf("next waiter after a failed stamp: %v", err)
		}
		mustRelease(t, b, c)
	})
}
