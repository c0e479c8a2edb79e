package backendtest_test

import (
	"context"
	"strings"
	"sync"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// brokenBackend makes a deliberately wrong backend; mustFail names the
// suite's subtests that must catch it.
type brokenBackend struct {
	make     func() backend.Backend
	mustFail []string
}

// registerBroken adds bs to brokenBackends; other files' init functions
// register theirs so.
func registerBroken(bs map[string]brokenBackend) {
	for name, b := range bs {
		brokenBackends[name] = b
	}
}

// brokenBackends are deliberately wrong backends, each wrapping a correct
// memory.Backend and breaking one guarantee, with the suite's subtests that
// must catch it.
var brokenBackends = map[string]brokenBackend{
	"decreasing-tokens": {
		func() backend.Backend { return decreasingTokens{memory.New()} },
		[]string{"TokensStrictlyIncrease", "MutualExclusion"},
	},
	"double-holder": {
		func() backend.Backend { return doubleHolder{memory.New()} },
		[]string{"MutualExclusion"},
	},
	"unconditional-release": {
		func() backend.Backend { return &unconditionalRelease{Backend: memory.New()} },
		[]string{"ReleaseComparesIdentity", "ReleaseOfEveryKindComparesIdentity"},
	},
	"ignores-fairness": {
		func() backend.Backend { return ignoresFairness{memory.New()} },
		[]string{"FairWaitersAreFIFO", "NonFairYieldsToQueuedFair"},
	},
	"shared-prefix-queue": {
		func() backend.Backend { return sharedPrefixQueue{memory.New()} },
		[]string{"DistinctKeysAreIndependent"},
	},
	"silent-loss": {
		func() backend.Backend { return silentLoss{memory.New()} },
		[]string{"RevokeSignalsLoss", "UnrenewedLeaseExpires", "RevokeSignalsLossOfEveryKind"},
	},
	"abandoned-wait": {
		func() backend.Backend { return abandonedWait{memory.New()} },
		[]string{"CancelledWaitLeavesNothing", "CancelledWaitOfEveryKindLeavesNothing"},
	},
}

// decreasingTokens hands out tokens that count down: each holder's token is
// below the previous one's.
type decreasingTokens struct{ backend.Backend }

const tokenCeiling = 1 << 40

func flip(t uint64) uint64 {
	if t == 0 {
		return 0
	}
	return tokenCeiling - t
}

func (d decreasingTokens) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	c, err := d.Backend.Acquire(ctx, r)
	c.Token = flip(c.Token)
	return c, err
}

func (d decreasingTokens) Release(ctx context.Context, c backend.Claim) error {
	c.Token = flip(c.Token)
	return d.Backend.Release(ctx, c)
}

func (d decreasingTokens) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	info, err := d.Backend.Inspect(ctx, key)
	info.Token = flip(info.Token)
	for i := range info.Waiters {
		info.Waiters[i].Token = flip(info.Waiters[i].Token)
	}
	return info, err
}

// doubleHolder queues non-fair requests on a hidden key of their own, so a
// non-fair claim holds the key alongside a fair one.
type doubleHolder struct{ backend.Backend }

const shadow = "\x00shadow"

func (d doubleHolder) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	key := r.Key
	if !r.Fair {
		r.Key += shadow
	}
	c, err := d.Backend.Acquire(ctx, r)
	c.Key = key
	return c, err
}

func (d doubleHolder) Release(ctx context.Context, c backend.Claim) error {
	if err := d.Backend.Release(ctx, c); err != nil {
		return err
	}
	c.Key += shadow
	return d.Backend.Release(ctx, c)
}

// unconditionalRelease removes whoever holds the key, like an Unlock that
// deletes by key instead of comparing the claim's identity.
type unconditionalRelease struct {
	backend.Backend
	mu  sync.Mutex
	ids map[uint64]string // token -> claim ID of every claim handed out
}

func (u *unconditionalRelease) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	c, err := u.Backend.Acquire(ctx, r)
	if err == nil {
		u.mu.Lock()
		if u.ids == nil {
			u.ids = map[uint64]string{}
		}
		u.ids[c.Token] = c.ID
		u.mu.Unlock()
	}
	return c, err
}

func (u *unconditionalRelease) Release(ctx context.Context, c backend.Claim) error {
	info, err := u.Backend.Inspect(ctx, c.Key)
	if err != nil || !info.Held {
		return err
	}
	u.mu.Lock()
	id := u.ids[info.Token]
	u.mu.Unlock()
	return u.Backend.Release(ctx, backend.Claim{Key: c.Key, ID: id, Token: info.Token})
}

// ignoresFairness treats every request as non-fair.
type ignoresFairness struct{ backend.Backend }

func (i ignoresFairness) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	r.Fair = false
	return i.Backend.Acquire(ctx, r)
}

// sharedPrefixQueue stores a key under its first path segment, so "a" and
// "a/b" share one queue, as a store scanning by unescaped prefix would.
type sharedPrefixQueue struct{ backend.Backend }

func storeKey(key string) string {
	if i := strings.IndexByte(key, '/'); i > 0 {
		return key[:i]
	}
	return key
}

func (s sharedPrefixQueue) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	key := r.Key
	r.Key = storeKey(key)
	c, err := s.Backend.Acquire(ctx, r)
	c.Key = key
	return c, err
}

func (s sharedPrefixQueue) Release(ctx context.Context, c backend.Claim) error {
	c.Key = storeKey(c.Key)
	return s.Backend.Release(ctx, c)
}

func (s sharedPrefixQueue) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	info, err := s.Backend.Inspect(ctx, storeKey(key))
	info.Key = key
	return info, err
}

// silentLoss never calls OnLost.
type silentLoss struct{ backend.Backend }

func (s silentLoss) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	r.OnLost = nil
	return s.Backend.Acquire(ctx, r)
}

// abandonedWait gives up on a cancelled wait without removing its claim,
// which stays queued and later takes the key for nobody: the bug of
// cleaning up on the caller's (dead) context.
type abandonedWait struct{ backend.Backend }

func (a abandonedWait) Acquire(ctx context.Context, r backend.AcquireRequest) (backend.Claim, error) {
	type result struct {
		c   backend.Claim
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Runs until the inner backend hands it the key or closes.
		c, err := a.Backend.Acquire(context.WithoutCancel(ctx), r)
		done <- result{c, err}
	}()
	select {
	case res := <-done:
		return res.c, res.err
	case <-ctx.Done():
		return backend.Claim{}, ctx.Err()
	}
}
