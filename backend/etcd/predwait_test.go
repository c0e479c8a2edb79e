package etcd

import "testing"

// isClosed reports whether ch is closed, without blocking.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A predecessor wait relies on the loss watch only while the watch is
// established and has dispatched nothing at or above the wait's start; it
// wakes on exactly the deletes that satisfy it.
func TestPredWaitRegistration(t *testing.T) {
	tests := []struct {
		name        string
		established int64   // watchEstablished(this) first; -1: never
		dispatched  []int64 // deletes of "other" dispatched before waitPred
		progress    int64   // progress revision of that response
		from        int64
		wantOK      bool
	}{
		{"watch not established", -1, nil, 0, 10, false},
		{"established below from", 5, nil, 0, 10, true},
		{"established at from", 10, nil, 0, 10, false},
		// The ring shows that none of the deletes in [from, last] was of k.
		{"a dispatched delete at from", 5, []int64{10}, 0, 10, true},
		{"a dispatched delete below from", 5, []int64{9}, 0, 10, true},
		{"a progress notification at from", 5, nil, 10, 10, true},
		{"a progress notification below from", 5, nil, 9, 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRegistry()
			if tt.established >= 0 {
				r.watchEstablished(tt.established)
			}
			var dels []deleted
			for _, rev := range tt.dispatched {
				dels = append(dels, deleted{key: "other", rev: rev})
			}
			r.observeDeletes(dels, tt.progress)
			_, cancel, ok := r.waitPred("k", tt.from)
			if ok != tt.wantOK {
				t.Fatalf("waitPred ok = %v, want %v", ok, tt.wantOK)
			}
			if ok {
				cancel()
			}
			if n := len(r.preds); n != 0 {
				t.Fatalf("%d keys still have waits after cancel", n)
			}
		})
	}
}

func TestPredWaitWakesOnItsDeleteOnly(t *testing.T) {
	tests := []struct {
		name     string
		key      string
		rev      int64
		wantWake bool
	}{
		{"delete of the key at from", "k", 10, true},
		{"delete of the key after from", "k", 12, true},
		{"delete of the key before from", "k", 9, false},
		{"delete of another key", "k2", 12, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRegistry()
			r.watchEstablished(5)
			ch, cancel, ok := r.waitPred("k", 10)
			if !ok {
				t.Fatal("waitPred refused on an established watch")
			}
			t.Cleanup(cancel)
			r.observeDeletes([]deleted{{key: tt.key, rev: tt.rev}}, 0)
			if got := isClosed(ch); got != tt.wantWake {
				t.Fatalf("woken = %v, want %v", got, tt.wantWake)
			}
			if tt.wantWake && len(r.preds) != 0 {
				t.Fatal("a woken wait is still registered")
			}
		})
	}
}

// Waits on one key from different revisions wake independently, and a
// cancelled wait is neither woken nor kept.
func TestPredWaitSeveralOnOneKey(t *testing.T) {
	r := newRegistry()
	r.watchEstablished(5)
	early, cancelEarly, ok1 := r.waitPred("k", 8)
	late, cancelLate, ok2 := r.waitPred("k", 12)
	gone, cancelGone, ok3 := r.waitPred("k", 8)
	if !ok1 || !ok2 || !ok3 {
		t.Fatal("waitPred refused on an established watch")
	}
	defer cancelEarly()
	defer cancelLate()
	cancelGone()

	r.observeDeletes([]deleted{{key: "k", rev: 9}}, 0)
	if !isClosed(early) || isClosed(late) || isClosed(gone) {
		t.Fatalf("after delete at 9: early %v late %v cancelled %v; want true false false",
			isClosed(early), isClosed(late), isClosed(gone))
	}
	cancelEarly() // after the wake: a no-op
	if n := len(r.preds["k"]); n != 1 {
		t.Fatalf("%d waits registered on k, want 1 (late)", n)
	}
	r.observeDeletes([]deleted{{key: "k", rev: 12}}, 0)
	if !isClosed(late) {
		t.Fatal("late wait not woken by the delete at its start revision")
	}
	if len(r.preds) != 0 {
		t.Fatal("waits left registered after every one was woken")
	}
}

// When the loss watch stops, every wait wakes (its waiter looks again) and
// no new wait registers until the watch is established again.
func TestPredWaitWatchStopped(t *testing.T) {
	r := newRegistry()
	r.watchEstablished(5)
	a, cancelA, _ := r.waitPred("a", 10)
	b, cancelB, _ := r.waitPred("b", 20)
	defer cancelA()
	defer cancelB()
	r.watchStopped()
	if !isClosed(a) || !isClosed(b) {
		t.Fatal("a wait survived the loss watch's stop")
	}
	if len(r.preds) != 0 {
		t.Fatal("waits left registered after the stop")
	}
	if _, _, ok := r.waitPred("a", 30); ok {
		t.Fatal("waitPred accepted while the loss watch is down")
	}
	// Resumed from below what was already dispatched: last stays where it
	// was, which only refuses more.
	r.observeDeletes([]deleted{{key: "x", rev: 25}}, 0)
	r.watchEstablished(21)
	if _, _, ok := r.waitPred("a", 25); ok {
		t.Fatal("waitPred accepted a start at or below a dispatched delete")
	}
	_, cancel, ok := r.waitPred("a", 26)
	if !ok {
		t.Fatal("waitPred refused after the watch was established again")
	}
	cancel()
}

// Once the loss watch has dispatched deletes at or above a wait's start,
// the ring of recent deletes decides: a remembered delete of the key
// satisfies the wait at once, the absence of one lets it register, and
// anything the ring may have forgotten sends it to the fallback.
func TestPredWaitUsesRecentDeletes(t *testing.T) {
	t.Run("a remembered delete of the key satisfies the wait", func(t *testing.T) {
		r := newRegistry()
		r.watchEstablished(5)
		r.observeDeletes([]deleted{{key: "k", rev: 10}, {key: "other", rev: 11}}, 0)
		ch, cancel, ok := r.waitPred("k", 9)
		if !ok || !isClosed(ch) {
			t.Fatalf("waitPred = ok %v, closed %v; want a wait already satisfied", ok, ok && isClosed(ch))
		}
		cancel()
		if _, _, ok := r.waitPred("k", 11); !ok {
			t.Fatal("a wait starting after the remembered delete was refused")
		}
	})
	t.Run("a delete older than the wait does not satisfy it", func(t *testing.T) {
		r := newRegistry()
		r.watchEstablished(5)
		r.observeDeletes([]deleted{{key: "k", rev: 8}, {key: "other", rev: 11}}, 0)
		ch, cancel, ok := r.waitPred("k", 9)
		if !ok || isClosed(ch) {
			t.Fatalf("waitPred = ok %v; want registered and not yet woken", ok)
		}
		r.observeDeletes([]deleted{{key: "k", rev: 12}}, 0)
		if !isClosed(ch) {
			t.Fatal("a later delete of k did not wake the registered wait")
		}
		cancel()
	})
	t.Run("a delete of an earlier claim under the same name does not satisfy the wait", func(t *testing.T) {
		// Names are reused: the name's previous claim was deleted at 8, the
		// name lent again and the predecessor created under it at 9. The
		// waiter read the predecessor at 10, so it waits from 11; another
		// delete at 12 was dispatched before it registered, so the ring is
		// consulted.
		r := newRegistry()
		r.watchEstablished(5)
		r.observeDeletes([]deleted{{key: "name", rev: 8}, {key: "other", rev: 12}}, 0)
		ch, cancel, ok := r.waitPred("name", 11)
		if !ok || isClosed(ch) {
			t.Fatalf("waitPred = ok %v, closed %v; want registered and not yet woken (the predecessor is alive)",
				ok, ok && isClosed(ch))
		}
		defer cancel()
		r.observeDeletes([]deleted{{key: "name", rev: 13}}, 0)
		if !isClosed(ch) {
			t.Fatal("the predecessor's own delete did not wake the wait")
		}
	})
	t.Run("a full ring forgets, and the wait falls back", func(t *testing.T) {
		r := newRegistry()
		r.watchEstablished(5)
		var dels []deleted
		for rev := int64(6); rev < 6+recentDeletes+1; rev++ {
			dels = append(dels, deleted{key: "other", rev: rev})
		}
		r.observeDeletes(dels, 0)
		if _, _, ok := r.waitPred("k", 6); ok {
			t.Fatal("waitPred relied on a delete the ring has forgotten")
		}
		if _, _, ok := r.waitPred("k", 7); !ok {
			t.Fatal("waitPred refused a start the ring still covers")
		}
	})
	t.Run("a stopped watch forgets everything", func(t *testing.T) {
		r := newRegistry()
		r.watchEstablished(5)
		r.observeDeletes([]deleted{{key: "other", rev: 8}}, 0)
		r.watchStopped()
		r.watchEstablished(8)
		if _, _, ok := r.waitPred("k", 7); ok {
			t.Fatal("waitPred relied on deletes seen before the watch stopped")
		}
		if _, _, ok := r.waitPred("k", 9); !ok {
			t.Fatal("waitPred refused a start above the restarted watch's revision")
		}
	})
}
