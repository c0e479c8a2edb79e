package ashlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// ErrNoLeader: Election.Leader found nobody leading.
var ErrNoLeader = errors.New("ashlock: no leader")

// An Election is a named leadership, built on a lock: a candidate becomes
// leader by holding the lock named after the election, and publishes a
// value with its claim (an address, an identity) for everyone to read.
// The guard's fencing token is the term: strictly greater than every
// earlier term of the election, so a resource that checks it (package
// fencing) refuses a deposed leader's late writes.
//
// Make one with LockClient.Election. Like a LockBuilder it is a value:
// setters return a new Election and never fail, problems are reported by
// the call that uses it, and one Election serves any number of calls at
// once.
type Election struct {
	// lock is Lock(name) with the election's options, without a value:
	// its key is the election's name, its client the election's.
	lock *LockBuilder
}

// Leader is who leads an election, as Leader and Observe report it. Token
// is the leader's term (its guard's fencing token); a zero Leader (Token
// 0) means nobody leads. Since is when the term began, by the store's or
// the leader's clock. Name is always the election's name.
type Leader struct {
	Name  string
	Value []byte
	Owner string
	Token uint64
	Since time.Time
}

// Election returns the election called name: a lock on the key name whose
// holder leads. It never fails; the name is checked like a key by the
// calls that use it.
func (c *LockClient) Election(name string) *Election {
	return &Election{lock: c.Lock(name)}
}

// WithTTL sets the TTL of a leader's lease, as LockBuilder.WithTTL does:
// how long leadership outlives a leader's process dying without resigning.
func (e *Election) WithTTL(d time.Duration) *Election { return e.with(e.lock.WithTTL(d)) }

// WithWatchdogInterval sets how often a leader's lease is renewed, as
// LockBuilder.WithWatchdogInterval does.
func (e *Election) WithWatchdogInterval(d time.Duration) *Election {
	return e.with(e.lock.WithWatchdogInterval(d))
}

// WithOwner sets the owner label a leader is shown with (Leader.Owner), as
// LockBuilder.WithOwner does.
func (e *Election) WithOwner(label string) *Election { return e.with(e.lock.WithOwner(label)) }

// with returns a copy of e with lock as its lock options.
func (e *Election) with(lock *LockBuilder) *Election {
	ne := *e
	ne.lock = lock
	return &ne
}

// Campaign blocks until the caller leads the election, then returns the
// guard of its term: Lock(name).WithValue(value).Acquire(ctx), with the
// election's options. Candidates lead in the order they campaigned. The
// guard's FencingToken is the term; Done closes the moment the term is
// lost, SetValue changes the published value, and Unlock resigns.
//
// Errors are Acquire's. A Campaign that fails, or whose ctx ends, leaves
// nothing behind in the store.
func (e *Election) Campaign(ctx context.Context, value []byte) (*Guard, error) {
	return e.lock.WithValue(value).Acquire(ctx)
}

// Leader reports who leads the election now, with one read of the store.
// It returns ErrNoLeader when nobody does, and otherwise Inspect's errors.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	info, err := e.lock.client.Inspect(ctx, e.lock.key)
	if err != nil {
		return Leader{}, err
	}
	l := leaderOf(e.lock.key, info)
	if l.Token == 0 {
		return Leader{}, fmt.Errorf("%w in election %q", ErrNoLeader, e.lock.key)
	}
	return l, nil
}

// leaderOf maps a key's state to its leader: the oldest holder, whose
// label, token and acquisition time are LockInfo's own, or a zero Leader
// (but for its name) when the key is free.
func leaderOf(name string, info LockInfo) Leader {
	l := Leader{Name: name, Owner: info.Owner, Token: info.Token, Since: info.AcquiredAt}
	if len(info.Holders) > 0 {
		l.Value = info.Holders[0].Value
	}
	return l
}

// Backoff between campaigns that failed for a reason that may pass (the
// store out of reach, a lease lost while campaigning).
const (
	minCampaignBackoff = 100 * time.Millisecond
	maxCampaignBackoff = 5 * time.Second
)

// Run is the leader loop: it campaigns, calls lead once the caller leads,
// resigns when lead returns, and campaigns again, until ctx ends.
//
// lead gets the term (the guard's fencing token) and a context derived from
// ctx that is cancelled the moment the term is lost, with context.Cause
// returning an error wrapping ErrLeaseExpired (ErrUnlocked if the client is
// closed meanwhile). After such a loss the store may elect the next leader
// before lead has returned: only fencing with the term protects a resource
// then, so lead must attach the token to its writes and stop when its
// context ends.
//
// When lead returns, Run releases the term. It then campaigns again, at
// the back of the queue, if lead returned nil or the term had been lost
// (whatever lead returned); if lead failed while still leading, Run
// returns lead's error. Run never calls lead for a new term before the
// previous call has returned, nor for a term already lost when its
// campaign succeeded.
//
// A campaign that fails with ErrUnavailable or ErrLeaseExpired is retried
// with backoff, logged at WARN, until ctx ends; other errors (bad input,
// ErrClosed) are returned. Whenever ctx has ended, Run returns an error
// for which errors.Is(err, ctx.Err()) holds (joined with lead's error, if
// lead returned one then).
func (e *Election) Run(ctx context.Context, value []byte, lead func(ctx context.Context, token uint64) error) error {
	b := e.lock.WithValue(value)
	backoff := minCampaignBackoff
	for {
		if ctx.Err() != nil {
			return backend.ContextError(ctx)
		}
		s, err := b.acquire(ctx, true)
		if err != nil {
			if ctx.Err() != nil {
				return withCtx(ctx, err)
			}
			if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrLeaseExpired) {
				return err
			}
			// Jitter keeps candidates that failed together from
			// coming back together.
			d := backoff/2 + rand.N(backoff/2+1)
			e.lock.client.log.Warn("ashlock: campaign failed; retrying", "election", e.lock.key, "err", err, "backoff", d)
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return backend.ContextError(ctx)
			}
			backoff = min(2*backoff, maxCampaignBackoff)
			continue
		}
		backoff = minCampaignBackoff
		_, err, after := s.hold(ctx, lead)
		switch {
		case ctx.Err() != nil:
			if err != nil && !errors.Is(err, ctx.Err()) {
				return errors.Join(err, backend.ContextError(ctx))
			}
			return backend.ContextError(ctx)
		case err != nil && after == nil:
			return err // lead failed while still leading
		}
		// lead returned nil, or the term was lost (or ended by Close:
		// the next campaign then returns ErrClosed).
	}
}
