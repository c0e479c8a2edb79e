package memory_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

func TestManualClock(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := memory.NewManualClock(start)
	var fired []string
	at := map[string]time.Time{}
	schedule := func(name string, d time.Duration) memory.Timer {
		return c.AfterFunc(d, func() {
			fired = append(fired, name)
			at[name] = c.Now()
		})
	}
	schedule("3s", 3*time.Second)
	schedule("1s", time.Second)
	schedule("1s again", time.Second)
	stopped := schedule("2s stopped", 2*time.Second)
	c.AfterFunc(1500*time.Millisecond, func() {
		fired = append(fired, "1.5s")
		c.AfterFunc(time.Second, func() { fired = append(fired, "2.5s (scheduled by 1.5s)") })
	})
	if !stopped.Stop() {
		t.Error("Stop of a pending timer returned false")
	}
	if stopped.Stop() {
		t.Error("second Stop returned true")
	}

	c.Advance(time.Second - time.Nanosecond)
	if len(fired) != 0 {
		t.Fatalf("fired %v before any was due", fired)
	}
	c.Advance(2 * time.Second)
	want := []string{"1s", "1s again", "1.5s", "2.5s (scheduled by 1.5s)"}
	if !slices.Equal(fired, want) {
		t.Errorf("fired %v, want %v", fired, want)
	}
	if got := at["1s"]; !got.Equal(start.Add(time.Second)) {
		t.Errorf("Now inside the 1s timer: %v, want its due time", got)
	}
	if got, want := c.Now(), start.Add(3*time.Second-time.Nanosecond); !got.Equal(want) {
		t.Errorf("Now after advancing: %v, want %v", got, want)
	}
	c.Advance(time.Nanosecond)
	if fired[len(fired)-1] != "3s" {
		t.Errorf("3s timer did not fire at 3s: %v", fired)
	}
	c.Advance(-time.Hour)
	if got := c.Now(); !got.Equal(start.Add(3 * time.Second)) {
		t.Errorf("negative Advance moved the clock to %v", got)
	}
	c.AfterFunc(0, func() { fired = append(fired, "now") })
	c.Advance(0)
	if fired[len(fired)-1] != "now" {
		t.Errorf("a zero-delay timer did not fire at Advance(0): %v", fired)
	}
}

func TestWithManualClockDrivesExpiry(t *testing.T) {
	clock := memory.NewManualClock(time.Unix(1000, 0))
	b := newBackend(t, memory.WithClock(clock))
	l := grant(t, b, 5*time.Second)
	lost := newLost()
	r := request("k", l, "A")
	r.OnLost = backend.LossFunc(lost.onLost)
	c := mustAcquire(t, b, r)
	if !c.AcquiredAt.Equal(time.Unix(1000, 0)) {
		t.Errorf("AcquiredAt %v, want the manual clock's time", c.AcquiredAt)
	}
	clock.Advance(5*time.Second - time.Nanosecond)
	if info := inspect(t, b, "k"); !info.Held {
		t.Fatal("lease ended before its TTL on the manual clock")
	}
	clock.Advance(time.Nanosecond)
	lost.await(t)
	if info := inspect(t, b, "k"); info.Held {
		t.Error("key still held after the manual clock passed the TTL")
	}
}
