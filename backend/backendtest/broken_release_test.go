package backendtest_test

import (
	"context"
	"sync"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// Broken backends whose Release of a claim they no longer have removes a
// later claim, registered in brokenBackends.
func init() {
	registerBroken(map[string]brokenBackend{
		"release-by-name": {
			func() backend.Backend { return &releaseByName{Backend: memory.New()} },
			[]string{"ReleaseComparesIdentity", "ReleaseOfEveryKindComparesIdentity"},
		},
		"multikey-release-by-name-past-first-key": {
			func() backend.Backend { return &releaseByName{Backend: memory.New(), from: 1} },
			[]string{"ReleaseOfEveryKindComparesIdentity"},
		},
	})
}

// releaseByName ignores a claim's identity once the claim is gone: a
// Release of a claim the store no longer has removes, at each of the
// claim's keys from the from-th on, every holder that has the name the
// claim had there in a store that names claims after their lease and kind
// (as backend/etcd does), whatever its token. That is a delete by name
// that does not compare the create revision, retried or sent late. With
// from 1 a multi-key claim's Release compares identity at its first key
// and deletes by name at the others, and single-key claims are released
// correctly.
type releaseByName struct {
	backend.Backend
	from int

	mu     sync.Mutex
	claims map[uint64]backend.Claim // token -> every claim handed out
}

func (r *releaseByName) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Claim, error) {
	c, err := r.Backend.Acquire(ctx, req)
	if err == nil {
		r.mu.Lock()
		if r.claims == nil {
			r.claims = map[uint64]backend.Claim{}
		}
		r.claims[c.Token] = c
		r.mu.Unlock()
	}
	return c, err
}

func (r *releaseByName) claim(token uint64) (backend.Claim, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.claims[token]
	return c, ok
}

// has reports whether the store still has c: a claim handed out with c's
// ID and token that holds c.Key.
func (r *releaseByName) has(ctx context.Context, c backend.Claim) (bool, error) {
	if x, ok := r.claim(c.Token); !ok || x.ID != c.ID || x.Key != c.Key {
		return false, nil
	}
	info, err := r.Backend.Inspect(ctx, c.Key)
	if err != nil {
		return false, err
	}
	for _, h := range info.Holders {
		if h.Token == c.Token {
			return true, nil
		}
	}
	return false, nil
}

func (r *releaseByName) Release(ctx context.Context, c backend.Claim) error {
	ok, err := r.has(ctx, c)
	if err != nil {
		return err
	}
	if ok {
		return r.Backend.Release(ctx, c)
	}
	keys := c.AllKeys()
	for _, k := range keys[min(r.from, len(keys)):] {
		info, err := r.Backend.Inspect(ctx, k)
		if err != nil {
			return err
		}
		for _, h := range info.Holders {
			x, ok := r.claim(h.Token)
			if ok && x.Lease == c.Lease && x.Shared == c.Shared && max(x.Permits, 1) == max(c.Permits, 1) {
				if err := r.Backend.Release(ctx, x); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
