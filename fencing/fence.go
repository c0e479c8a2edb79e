package fencing

import (
	"sync"
	"sync/atomic"
)

// Fence keeps high-water marks of admitted tokens per resource name. The
// zero Fence is ready to use and holds marks of 0 for every resource. A
// Fence is safe for concurrent use by any number of goroutines and must not
// be copied after first use.
//
// Per resource it keeps two marks: the highest token of any admitted
// operation (H) and the highest token admitted by Admit, for an exclusive
// holder (E). Admit(t) needs t >= H and then sets E = H = t; AdmitShared(t)
// needs t >= E and then raises H to t. So shared holders (readers) never
// refuse each other, a stale exclusive holder is refused after a newer
// shared one, and a stale shared holder after a newer exclusive one.
//
// A Fence never forgets a resource; see the package documentation for what
// that means for the set of names, and for why reads should be admitted as
// well as writes.
type Fence struct {
	// byResource maps a resource name to its *marks. A sync.Map suits
	// the access pattern: each resource's entry is written once and then
	// only read, so lookups take no lock.
	byResource sync.Map
}

// marks are one resource's two marks. Both only ever grow, and e <= h
// except inside an Admit. They are read without the lock, so a request
// that changes nothing (the current holder's next request) takes no lock;
// they are changed only under mu. Admit stores e before h: an Admit takes
// effect when its e is stored, so anyone who has seen its h (a refused
// stale Admit reports it) sees its e too, and a reader below it is refused.
// While h still lags, every lock-free decision errs towards the lock (see
// the fast paths), never towards admitting.
type marks struct {
	mu   sync.Mutex
	h, e atomic.Uint64
}

// Admit decides whether a request of an exclusive holder carrying token
// may proceed against resource. If token is at least the highest token
// admitted for resource (by Admit or AdmitShared), Admit raises both marks
// to token and returns nil. Otherwise it returns a *StaleTokenError (which
// wraps ErrStaleToken) and leaves the marks unchanged.
//
// Admit never blocks on anything but other admissions to the same resource
// (briefly, and only when a mark must move). Calls for the same resource
// are linearizable: once an Admit or AdmitShared of some token has returned
// nil, every Admit of a smaller token for that resource, started
// afterwards, fails.
//
// Admit only decides. Make it and the request it guards one step with
// respect to other requests on the same resource (see the package
// documentation), or a stale request may still be applied after a newer one.
func (f *Fence) Admit(resource string, token uint64) error {
	m := f.of(resource)
	// Lock-free first, loading e and then h. Both only grow, so a token
	// below h is stale at the moment h was loaded. If both read token, both
	// marks were token when e was loaded (h trails e only inside an Admit,
	// which sets both to one token), and there is nothing to change (the
	// current holder's next request).
	e := m.e.Load()
	h := m.h.Load()
	if !ValidateWrite(token, h) {
		return &StaleTokenError{Resource: resource, Token: token, Highest: h}
	}
	if e == token && h == token {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h = m.h.Load()
	if !ValidateWrite(token, h) {
		return &StaleTokenError{Resource: resource, Token: token, Highest: h}
	}
	m.e.Store(token)
	m.h.Store(token)
	return nil
}

// AdmitShared decides whether a request of a shared holder (a reader of a
// shared lock) carrying token may proceed against resource. If token is at
// least the highest token admitted by Admit for resource, AdmitShared
// raises the resource's highest admitted token to token (if it is higher)
// and returns nil: shared holders never refuse one another, whatever order
// their tokens arrive in. Otherwise it returns a *StaleTokenError (which
// wraps ErrStaleToken) reporting the exclusive mark, and changes nothing.
//
// It blocks like Admit and is linearizable with it: once an Admit of some
// token has returned nil, every AdmitShared of a smaller token for that
// resource, started afterwards, fails; and once an AdmitShared of some
// token has returned nil, every Admit of a smaller token fails.
func (f *Fence) AdmitShared(resource string, token uint64) error {
	m := f.of(resource)
	// Lock-free: h first, then e. If token lies between them, then at the
	// moment e was loaded e <= token <= h (h only grows): admitted, and
	// there is nothing to change.
	h := m.h.Load()
	e := m.e.Load()
	if token < e {
		return &StaleTokenError{Resource: resource, Token: token, Highest: e}
	}
	if token <= h {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.e.Load(); token < e {
		return &StaleTokenError{Resource: resource, Token: token, Highest: e}
	}
	if token > m.h.Load() {
		m.h.Store(token)
	}
	return nil
}

// Highest returns the largest token admitted for resource, by Admit or
// AdmitShared, or 0 if none has been. It never blocks and does not record
// resource. The value may be outdated by the time the caller looks at it
// if other goroutines are admitting tokens for the same resource.
func (f *Fence) Highest(resource string) uint64 {
	if v, ok := f.byResource.Load(resource); ok {
		return v.(*marks).h.Load()
	}
	return 0
}

// of returns resource's marks, creating them at 0 on first use.
func (f *Fence) of(resource string) *marks {
	// Load first: LoadOrStore would allocate fresh marks on every call,
	// and after a resource's first request the entry is always there.
	if v, ok := f.byResource.Load(resource); ok {
		return v.(*marks)
	}
	v, _ := f.byResource.LoadOrStore(resource, new(marks))
	return v.(*marks)
}
