package ashlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

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
			e.client.log.Warn("ashlock: campaign failed; retrying", "election", e.name, "err", err, "backoff", d)
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
