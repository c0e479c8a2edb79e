package etcd

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestNamePoolLendsBackWhatWasGiven(t *testing.T) {
	p := newNamePool(nil, nil)
	a1, a2 := borrowName(p, "a"), borrowName(p, "a")
	if a1 == a2 {
		t.Fatalf("two borrows with nothing given back returned the same name %q", a1)
	}
	for _, n := range []string{a1, a2} {
		if _, err := uuid.Parse(n); err != nil {
			t.Fatalf("new name %q is not a UUID: %v", n, err)
		}
	}
	p.giveBack("a", a1, nil)
	if got := borrowName(p, "b"); got == a1 {
		t.Fatal("a name given back for key a was lent for key b")
	}
	if got := borrowName(p, "a"); got != a1 {
		t.Fatalf("borrow after giveBack = %q, want the free name %q", got, a1)
	}
	if got := borrowName(p, "a"); got == a1 || got == a2 {
		t.Fatalf("borrow lent %q again while it was still out", got)
	}
}

func TestNamePoolBounds(t *testing.T) {
	t.Run("free names per key", func(t *testing.T) {
		p := newNamePool(nil, nil)
		given := map[string]bool{}
		var out []string
		for range maxFreeNames + 3 {
			n := borrowName(p, "k")
			given[n] = true
			out = append(out, n)
		}
		for _, n := range out {
			p.giveBack("k", n, nil)
		}
		if got := p.keys["k"].n; got != maxFreeNames {
			t.Fatalf("%d free names kept for one key, want %d", got, maxFreeNames)
		}
		for i := range maxFreeNames {
			if n := borrowName(p, "k"); !given[n] {
				t.Fatalf("borrow %d returned new name %q while free names were kept", i, n)
			}
		}
		if n := borrowName(p, "k"); given[n] {
			t.Fatalf("borrow returned %q, a name that should have been forgotten or is out", n)
		}
	})
	t.Run("keys remembered", func(t *testing.T) {
		p := newNamePool(nil, nil)
		for i := range maxNamedKeys + 100 {
			k := fmt.Sprintf("key-%d", i)
			p.giveBack(k, borrowName(p, k), nil)
		}
		if got := len(p.keys); got > maxNamedKeys {
			t.Fatalf("%d keys remembered, want at most %d", got, maxNamedKeys)
		}
	})
}

// Concurrent borrowers of one key never hold the same name at once.
func TestNamePoolConcurrentBorrowersNeverShare(t *testing.T) {
	p := newNamePool(nil, nil)
	var (
		mu    sync.Mutex
		out   = map[string]bool{} // names between borrow and giveBack
		dup   string
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for range 8 {
		wg.Go(func() {
			<-start
			for range 500 {
				n := borrowName(p, "k")
				mu.Lock()
				if out[n] {
					dup = n
				}
				out[n] = true
				mu.Unlock()
				runtime.Gosched() // let the others borrow while n is out
				mu.Lock()
				delete(out, n)
				mu.Unlock()
				p.giveBack("k", n, nil)
			}
		})
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("borrowers did not finish")
	}
	if dup != "" {
		t.Fatalf("name %q was lent to two borrowers at once", dup)
	}
}

// borrowName borrows a name from a pool that holds no watches.
func borrowName(p *namePool, key string) string {
	n := p.borrow(key).name
	return n
}

// A parked watch comes back with its name, and every watch the pool lets go
// of - the name forgotten, too many watches parked, the key evicted - is
// stopped, so none is left open for nobody.
func TestNamePoolParkedWatches(t *testing.T) {
	stopped := map[*keyWatch]bool{}
	p := newNamePool(func(w *keyWatch) { stopped[w] = true }, nil)

	w := &keyWatch{key: "k/1"}
	p.giveBack("k", "n1", w)
	if l := p.borrow("k"); l.name != "n1" || l.watch != w || l.short {
		t.Fatalf("borrow = %q, %p; want n1 with its parked watch %p", l.name, l.watch, w)
	}
	if p.parked != 0 {
		t.Fatalf("%d watches counted as parked after the only one was borrowed", p.parked)
	}

	t.Run("name forgotten", func(t *testing.T) {
		var ws []*keyWatch
		for i := range maxFreeNames + 1 {
			w := &keyWatch{key: fmt.Sprint(i)}
			ws = append(ws, w)
			p.giveBack("full", fmt.Sprint("n", i), w)
		}
		if !stopped[ws[maxFreeNames]] {
			t.Fatal("the watch of a forgotten name was not stopped")
		}
		for _, w := range ws[:maxFreeNames] {
			if stopped[w] {
				t.Fatal("the watch of a kept name was stopped")
			}
		}
	})
	t.Run("cap on parked watches", func(t *testing.T) {
		p := newNamePool(func(w *keyWatch) { stopped[w] = true }, nil)
		var last *keyWatch
		for i := range maxParkedWatches + 1 {
			last = &keyWatch{key: fmt.Sprint(i)}
			p.giveBack(fmt.Sprint("key-", i), "n", last)
		}
		if p.parked != maxParkedWatches {
			t.Fatalf("%d watches parked, want the cap %d", p.parked, maxParkedWatches)
		}
		if !stopped[last] {
			t.Fatal("a watch past the cap was not stopped")
		}
		if l := p.borrow(fmt.Sprint("key-", maxParkedWatches)); l.name != "n" || l.watch != nil || l.short {
			t.Fatalf("borrow = %q, %p; want the name kept without its watch", l.name, l.watch)
		}
	})
	t.Run("key evicted", func(t *testing.T) {
		p := newNamePool(func(w *keyWatch) { stopped[w] = true }, nil)
		var ws []*keyWatch
		for i := range maxNamedKeys + 1 {
			w := &keyWatch{key: fmt.Sprint(i)}
			if i >= maxParkedWatches {
				w = nil // under the cap, so that every eviction drops a watch it holds
			}
			ws = append(ws, w)
			p.giveBack(fmt.Sprint("key-", i%maxParkedWatches, "-", i), "n", w)
		}
		held := 0
		for _, f := range p.keys {
			for _, w := range f.watches[:f.n] {
				if w != nil {
					held++
					if stopped[w] {
						t.Fatal("a watch still in the pool was stopped")
					}
				}
			}
		}
		dropped := 0
		for _, w := range ws {
			if w != nil && stopped[w] {
				dropped++
			}
		}
		if held != p.parked || held+dropped != maxParkedWatches {
			t.Fatalf("%d watches held (counted %d) and %d stopped, want %d in all", held, p.parked, dropped, maxParkedWatches)
		}
	})
}

// A name given back after a short hold comes back marked short, once; a
// new name and one given back otherwise are not.
func TestNamePoolShortMark(t *testing.T) {
	p := newNamePool(func(*keyWatch) {}, nil)
	if p.borrow("k").short {
		t.Fatal("a new name came marked short")
	}
	p.giveBackShort("k", "s")
	if l := p.borrow("k"); l.name != "s" || l.watch != nil || !l.short {
		t.Fatalf("borrow = %q, %p, short %v; want s, no watch, short", l.name, l.watch, l.short)
	}
	p.giveBack("k", "s", nil)
	if l := p.borrow("k"); l.name != "s" || l.short {
		t.Fatalf("borrow = %q, short %v; want s, not short once given back plainly", l.name, l.short)
	}
}

func TestNamePoolKeepsQueueRead(t *testing.T) {
	built := map[string]int{}
	p := newNamePool(func(*keyWatch) {}, func(key string) *queueRead {
		built[key]++
		return newQueueRead("dir/" + key + "/")
	})
	if q := keptQueue(p, "a"); q != nil {
		t.Fatalf("queueOf a key never given back = %+v, want nil", q)
	}
	p.giveBack("a", borrowName(p, "a"), nil)
	q := keptQueue(p, "a")
	if q == nil || q.dir != "dir/a/" || string(q.newest.KeyBytes()) != "dir/a/" {
		t.Fatalf("queueOf(a) = %+v, want the read of dir/a/", q)
	}
	p.giveBackShort("a", borrowName(p, "a"))
	if again := keptQueue(p, "a"); again != q || built["a"] != 1 {
		t.Fatalf("queue read of a rebuilt (%d builds): %p then %p", built["a"], q, again)
	}
	// A forgotten key forgets its read too: past the cap, some key
	// (an arbitrary one) is forgotten.
	all := []string{"a"}
	for i := range maxNamedKeys {
		k := fmt.Sprint("k", i)
		all = append(all, k)
		p.giveBack(k, borrowName(p, k), nil)
	}
	forgotten := 0
	for _, k := range all {
		_, kept := p.keys[k]
		if q := keptQueue(p, k); kept != (q != nil) {
			t.Fatalf("key %q remembered=%v but queueOf = %+v", k, kept, q)
		}
		if !kept {
			forgotten++
		}
	}
	if forgotten == 0 {
		t.Fatalf("no key forgotten after %d keys", len(all))
	}
}

// keptQueue returns the queue read p keeps for key, nil if it keeps none.
func keptQueue(p *namePool, key string) *queueRead {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.keys[key]; f != nil {
		return f.q
	}
	return nil
}
