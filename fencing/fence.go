package fencing

import (
	"sync"
	"sync/atomic"
)

// Fence keeps a high-water mark of admitted tokens per resource name. The
// zero Fence is ready to use and holds a mark of 0 for every resource. A
// Fence is safe for concurrent use by any number of goroutines and must not
// be copied after first use.
//
// A Fence never forgets a resource; see the package documentation for what
// that means for the set of names, and for why reads should be admitted as
// well as writes.
type Fence struct {
	// marks maps a resource name to its *atomic.Uint64 mark. A sync.Map
	// suits the access pattern: each resource's entry is written once and
	// then only read, so lookups take no lock; the mark itself moves by
	// compare-and-swap, so admissions to different resources never contend
	// and admissions to one resource contend only on its own word.
	marks sync.Map
}

// Admit decides whether a request carrying token may proceed against
// resource. If token is at least the resource's mark, Admit raises the mark
// to token and returns nil. Otherwise it returns a *StaleTokenError (which
// wraps ErrStaleToken) and leaves the mark unchanged.
//
// Admit never blocks. Calls for the same resource are linearizable: once an
// Admit of some token has returned nil, every Admit of a smaller token for
// that resource, started afterwards, fails.
//
// Admit only decides. Make it and the request it guards one step with
// respect to other requests on the same resource (see the package
// documentation), or a stale request may still be applied after a newer one.
func (f *Fence) Admit(resource string, token uint64) error {
	mark := f.mark(resource)
	for {
		cur := mark.Load()
		if !ValidateWrite(token, cur) {
			return &StaleTokenError{Resource: resource, Token: token, Highest: cur}
		}
		// Raise the mark only if nobody moved it since the load; if
		// someone did, look again: the new mark may now exceed token.
		if token == cur || mark.CompareAndSwap(cur, token) {
			return nil
		}
	}
}

// Highest returns the largest token admitted for resource, or 0 if none
// has been. It never blocks and does not record resource. The value may be
// outdated by the time the caller looks at it if other goroutines are
// admitting tokens for the same resource.
func (f *Fence) Highest(resource string) uint64 {
	if v, ok := f.marks.Load(resource); ok {
		return v.(*atomic.Uint64).Load()
	}
	return 0
}

// mark returns resource's mark, creating it at 0 on first use.
func (f *Fence) mark(resource string) *atomic.Uint64 {
	// Load first: LoadOrStore would allocate a fresh mark on every call,
	// and after a resource's first request the entry is always there.
	if v, ok := f.marks.Load(resource); ok {
		return v.(*atomic.Uint64)
	}
	v, _ := f.marks.LoadOrStore(resource, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}
