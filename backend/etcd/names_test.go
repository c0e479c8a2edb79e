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
	p := newNamePool()
	a1, a2 := p.borrow("a"), p.borrow("a")
	if a1 == a2 {
		t.Fatalf("two borrows with nothing given back returned the same name %q", a1)
	}
	for _, n := range []string{a1, a2} {
		if _, err := uuid.Parse(n); err != nil {
			t.Fatalf("new name %q is not a UUID: %v", n, err)
		}
	}
	p.giveBack("a", a1)
	if got := p.borrow("b"); got == a1 {
		t.Fatal("a name given back for key a was lent for key b")
	}
	if got := p.borrow("a"); got != a1 {
		t.Fatalf("borrow after giveBack = %q, want the free name %q", got, a1)
	}
	if got := p.borrow("a"); got == a1 || got == a2 {
		t.Fatalf("borrow lent %q again while it was still out", got)
	}
}

func TestNamePoolBounds(t *testing.T) {
	t.Run("free names per key", func(t *testing.T) {
		p := newNamePool()
		given := map[string]bool{}
		var out []string
		for range maxFreeNames + 3 {
			n := p.borrow("k")
			given[n] = true
			out = append(out, n)
		}
		for _, n := range out {
			p.giveBack("k", n)
		}
		if got := p.keys["k"].n; got != maxFreeNames {
			t.Fatalf("%d free names kept for one key, want %d", got, maxFreeNames)
		}
		for i := range maxFreeNames {
			if n := p.borrow("k"); !given[n] {
				t.Fatalf("borrow %d returned new name %q while free names were kept", i, n)
			}
		}
		if n := p.borrow("k"); given[n] {
			t.Fatalf("borrow returned %q, a name that should have been forgotten or is out", n)
		}
	})
	t.Run("keys remembered", func(t *testing.T) {
		p := newNamePool()
		for i := range maxNamedKeys + 100 {
			k := fmt.Sprintf("key-%d", i)
			p.giveBack(k, p.borrow(k))
		}
		if got := len(p.keys); got > maxNamedKeys {
			t.Fatalf("%d keys remembered, want at most %d", got, maxNamedKeys)
		}
	})
}

// Concurrent borrowers of one key never hold the same name at once.
func TestNamePoolConcurrentBorrowersNeverShare(t *testing.T) {
	p := newNamePool()
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
				n := p.borrow("k")
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
				p.giveBack("k", n)
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
