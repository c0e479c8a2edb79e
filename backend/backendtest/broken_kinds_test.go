package backendtest_test

import (
	"context"
	"sync"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// Broken backends for the queue model's kinds of claim, registered in
// brokenBackends.
func init() {
	registerBroken(map[string]brokenBackend{
		"readers-jump-writers": {
			func() backend.Backend { return readersJumpWriters{memory.New()} },
			[]string{"ReadersDoNotStarveWriters", "SharedTryAcquire"},
		},
		"positional-permits": {
			func() backend.Backend { return positionalPermits{memory.New()} },
			[]string{"PermitsLowestFreeFirst", "InspectReportsHolders"},
		},
		"partial-multikey-try": {
			func() backend.Backend { return partialMultiKeyTry{memory.New()} },
			[]string{"MultiKeyTryAcquireLeavesNothing"},
		},
		"adopts-permits": {
			func() backend.Backend { return adoptsPermits{memory.New()} },
			[]string{"PermitMismatchLeavesNothing"},
		},
		"shared-as-exclusive": {
			func() backend.Backend { return sharedAsExclusive{memory.New()} },
			[]string{"SharedClaimsHoldTogether", "WriterReleaseAdmitsReaderRun"},
		},
		"multikey-one-at-a-time": {
			func() backend.Backend { return &oneKeyAtATime{Backend: memory.New()} },
			[]string{"MultiKeyHoldsEveryKey", "MultiKeyWaitsForEveryKey"},
		},
		"aliased-value": {
			func() backend.Backend { return &aliasedValue{Backend: memory.New()} },
			[]string{"ValuesPublishedAndSet"},
		},
		"setvalue-by-key": {
			func() backend.Backend { return &setValueByKey{Backend: memory.New()} },
			[]string{"SetValueComparesIdentity"},
		},
	})
}

// readersJumpWriters lets a shared request in at once whenever only shared
// claims hold the key, even past a queued writer: the reader-preferring
// read/write lock that starves writers. It puts such a reader on a hidden
// key of its own.
type readersJumpWriters struct{ backend.Backend }

func (b readersJumpWriters) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	if r.Shared && r.Keys == nil {
		info, err := b.Backend.Inspect(ctx, r.Key)
		readersOnly := err == nil && info.Held
		for _, h := range info.Holders {
			readersOnly = readersOnly && h.Shared
		}
		if readersOnly {
			key := r.Key
			r.Key += shadow
			c, err := b.Backend.Acquire(ctx, r)
			c.Key = key
			return c, err
		}
	}
	return b.Backend.Acquire(ctx, r)
}

func (b readersJumpWriters) Release(ctx context.Context, c backend.Claim) error {
	if err := b.Backend.Release(ctx, c); err != nil {
		return err
	}
	if c.Keys == nil {
		c.Key += shadow
		return b.Backend.Release(ctx, c)
	}
	return nil
}

// positionalPermits numbers a key's holders by their place among the
// holders instead of giving each the lowest free permit, so that after an
// early holder leaves, a newcomer shares a permit with a holder behind it.
type positionalPermits struct{ backend.Backend }

func (p positionalPermits) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	c, err := p.Backend.Acquire(ctx, r)
	if err == nil && c.Permits > 1 {
		info, ierr := p.Backend.Inspect(ctx, c.Key)
		if ierr == nil {
			for i, h := range info.Holders {
				if h.Token == c.Token {
					c.Permit = i
				}
			}
		}
	}
	return c, err
}

func (p positionalPermits) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	info, err := p.Backend.Inspect(ctx, key)
	if info.Permits > 1 {
		for i := range info.Holders {
			info.Holders[i].Permit = i
		}
	}
	return info, err
}

// adoptsPermits takes a single-key request with the permit count of the
// claims already queued on the key instead of refusing one whose count
// differs.
type adoptsPermits struct{ backend.Backend }

func (a adoptsPermits) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	if r.Keys == nil {
		if info, err := a.Backend.Inspect(ctx, r.Key); err == nil && info.Permits > 0 && info.Permits != max(r.Permits, 1) {
			r.Permits, r.Shared = info.Permits, false
		}
	}
	return a.Backend.Acquire(ctx, r)
}

// partialMultiKeyTry tries a multi-key set one key at a time and, when a
// key is held, fails without giving back the keys it took before it.
type partialMultiKeyTry struct{ backend.Backend }

func (p partialMultiKeyTry) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	if r.Wait || len(r.Keys) < 2 {
		return p.Backend.Acquire(ctx, r)
	}
	var taken []backend.Claim
	for _, k := range r.Keys {
		one := r
		one.Key, one.Keys, one.ID = k, nil, r.ID+"/"+k
		c, err := p.Backend.Acquire(ctx, one)
		if err != nil {
			return backend.Claim{}, err // the keys in taken stay held
		}
		taken = append(taken, c)
	}
	for _, c := range taken {
		if err := p.Backend.Release(ctx, c); err != nil {
			return backend.Claim{}, err
		}
	}
	return p.Backend.Acquire(ctx, r)
}

// aliasedValue publishes the caller's slices instead of copies, so a
// caller changing them later changes what Inspect shows.
type aliasedValue struct {
	backend.Backend
	mu     sync.Mutex
	values map[uint64][]byte // token -> the caller's slice
}

func (a *aliasedValue) keep(token uint64, v []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.values == nil {
		a.values = map[uint64][]byte{}
	}
	a.values[token] = v
}

func (a *aliasedValue) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	c, err := a.Backend.Acquire(ctx, r)
	if err == nil {
		a.keep(c.Token, r.Value)
	}
	return c, err
}

func (a *aliasedValue) SetValue(ctx context.Context, c backend.Claim, v []byte) error {
	err := a.Backend.SetValue(ctx, c, v)
	if err == nil {
		a.keep(c.Token, v)
	}
	return err
}

func (a *aliasedValue) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	info, err := a.Backend.Inspect(ctx, key)
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, h := range info.Holders {
		if v, ok := a.values[h.Token]; ok {
			info.Holders[i].Value = v
		}
	}
	return info, err
}

// setValueByKey sets the value of whoever holds the key, like a SetValue
// that writes by key instead of comparing the claim's identity.
type setValueByKey struct {
	backend.Backend
	mu  sync.Mutex
	ids map[uint64]string // token -> claim ID of every claim handed out
}

func (s *setValueByKey) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	c, err := s.Backend.Acquire(ctx, r)
	if err == nil {
		s.mu.Lock()
		if s.ids == nil {
			s.ids = map[uint64]string{}
		}
		s.ids[c.Token] = c.ID
		s.mu.Unlock()
	}
	return c, err
}

func (s *setValueByKey) SetValue(ctx context.Context, c backend.Claim, v []byte) error {
	info, err := s.Backend.Inspect(ctx, c.Key)
	if err != nil || !info.Held {
		return s.Backend.SetValue(ctx, c, v)
	}
	s.mu.Lock()
	id := s.ids[info.Token]
	s.mu.Unlock()
	holder := c
	holder.ID, holder.Token = id, info.Token
	return s.Backend.SetValue(ctx, holder, v)
}

// sharedAsExclusive takes shared requests as exclusive ones (and says they
// are shared): readers exclude each other.
type sharedAsExclusive struct{ backend.Backend }

func (s sharedAsExclusive) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	wasShared := r.Shared
	r.Shared = false
	c, err := s.Backend.Acquire(ctx, r)
	c.Shared = wasShared
	return c, err
}

// oneKeyAtATime takes a multi-key set one key after another, in the
// (sorted) order given, each with a claim and token of its own: it holds
// early keys while it waits for later ones, and its claim's token is the
// last key's.
type oneKeyAtATime struct {
	backend.Backend
	mu    sync.Mutex
	parts map[string][]backend.Claim // claim ID -> the per-key claims
}

func (o *oneKeyAtATime) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	if len(r.Keys) < 2 {
		return o.Backend.Acquire(ctx, r)
	}
	var parts []backend.Claim
	for _, k := range r.Keys {
		one := r
		one.Key, one.Keys = k, nil
		if one.ID != "" {
			one.ID += "/" + k
		}
		c, err := o.Backend.Acquire(ctx, one)
		if err != nil {
			for _, p := range parts {
				_ = o.Backend.Release(context.WithoutCancel(ctx), p)
			}
			return backend.Claim{}, err
		}
		parts = append(parts, c)
	}
	c := parts[len(parts)-1]
	c.Key, c.Keys, c.ID = r.Key, r.Keys, parts[0].ID
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.parts == nil {
		o.parts = map[string][]backend.Claim{}
	}
	o.parts[c.ID] = parts
	return c, nil
}

func (o *oneKeyAtATime) Release(ctx context.Context, c backend.Claim) error {
	o.mu.Lock()
	parts, ok := o.parts[c.ID]
	if ok && c.Keys != nil && parts[len(parts)-1].Token == c.Token {
		delete(o.parts, c.ID)
	}
	o.mu.Unlock()
	if !ok || c.Keys == nil {
		return o.Backend.Release(ctx, c)
	}
	for _, p := range parts {
		if err := o.Backend.Release(ctx, p); err != nil {
			return err
		}
	}
	return nil
}
