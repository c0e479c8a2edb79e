package backend_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/ash-lock/ashlock/backend"
)

// claim is a queued claim for the Describe table: its kind and token, and
// whether the store has recorded it as admitted (with its permit).
func claim(k backend.Kind, token uint64, admitted bool, permit int) backend.Queued {
	return backend.Queued{
		Kind: k, Token: token, Admitted: admitted, Permit: permit,
		Owner: "o" + string(rune('a'+token%26)), Value: []byte{byte(token)},
		AcquiredAt: time.Unix(int64(token), 0), Stamp: backend.Timestamp{WallTime: int64(token)},
	}
}

func holder(k backend.Kind, token uint64, permit int) backend.Holder {
	c := claim(k, token, true, permit)
	return backend.Holder{
		Owner: c.Owner, Token: token, Permit: permit, Shared: k.Shared,
		Value: c.Value, AcquiredAt: c.AcquiredAt, Stamp: c.Stamp,
	}
}

func waiter(k backend.Kind, token uint64) backend.Waiter {
	return backend.Waiter{Owner: claim(k, token, false, 0).Owner, Token: token, Shared: k.Shared}
}

func TestDescribe(t *testing.T) {
	const none = backend.NoPermit
	for _, tc := range []struct {
		name    string
		queue   []backend.Queued
		holders []backend.Holder
		waiters []backend.Waiter
		permits int
	}{
		{name: "free key"},
		{
			name:    "one exclusive holder",
			queue:   []backend.Queued{claim(x, 5, true, none)},
			holders: []backend.Holder{holder(x, 5, 0)},
			permits: 1,
		},
		{
			name:    "exclusive holder and waiters in queue order",
			queue:   []backend.Queued{claim(x, 5, true, none), claim(x, 7, false, none), claim(s, 9, false, none)},
			holders: []backend.Holder{holder(x, 5, 0)},
			waiters: []backend.Waiter{waiter(x, 7), waiter(s, 9)},
			permits: 1,
		},
		{
			name: "run of readers hold, the writer and readers behind it wait",
			queue: []backend.Queued{
				claim(s, 1, true, none), claim(s, 2, true, none), claim(x, 3, false, none), claim(s, 4, false, none),
			},
			holders: []backend.Holder{holder(s, 1, 0), holder(s, 2, 0)},
			waiters: []backend.Waiter{waiter(x, 3), waiter(s, 4)},
			permits: 1,
		},
		{
			name:    "admitted but behind a holder is a waiter",
			queue:   []backend.Queued{claim(x, 1, true, none), claim(x, 2, true, none)},
			holders: []backend.Holder{holder(x, 1, 0)},
			waiters: []backend.Waiter{waiter(x, 2)},
			permits: 1,
		},
		{
			name:    "free here but waiting at another key is a waiter",
			queue:   []backend.Queued{claim(x, 4, false, none), claim(x, 6, false, none)},
			waiters: []backend.Waiter{waiter(x, 4), waiter(x, 6)},
			permits: 1,
		},
		{
			name:    "readers free here, one of them waiting elsewhere",
			queue:   []backend.Queued{claim(s, 4, false, none), claim(s, 6, true, none)},
			holders: []backend.Holder{holder(s, 6, 0)},
			waiters: []backend.Waiter{waiter(s, 4)},
			permits: 1,
		},
		{
			name: "counted holders show their permits",
			queue: []backend.Queued{
				claim(c2, 3, true, 1), claim(c2, 5, true, 0), claim(c2, 8, false, none),
			},
			holders: []backend.Holder{holder(c2, 3, 1), holder(c2, 5, 0)},
			waiters: []backend.Waiter{waiter(c2, 8)},
			permits: 2,
		},
		{
			name:    "counted claim free but not yet admitted waits",
			queue:   []backend.Queued{claim(c3, 3, true, 0), claim(c3, 5, false, none)},
			holders: []backend.Holder{holder(c3, 3, 0)},
			waiters: []backend.Waiter{waiter(c3, 5)},
			permits: 3,
		},
		{
			name:    "counted claim behind an exclusive one is a waiter",
			queue:   []backend.Queued{claim(x, 3, true, none), claim(c3, 5, true, 0)},
			holders: []backend.Holder{holder(x, 3, 0)},
			waiters: []backend.Waiter{waiter(c3, 5)},
			permits: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := backend.Describe("k", tc.queue, true)
			assert.Equal(t, "k", info.Key)
			assert.Equal(t, tc.holders, info.Holders, "holders")
			assert.Equal(t, tc.waiters, info.Waiters, "waiters")
			assert.Equal(t, tc.permits, info.Permits, "permits")
			assert.Equal(t, len(tc.holders) > 0, info.Held, "held")
			if len(tc.holders) > 0 {
				h := tc.holders[0]
				assert.Equal(t, h.Owner, info.Owner)
				assert.Equal(t, h.Token, info.Token)
				assert.Equal(t, h.AcquiredAt, info.AcquiredAt)
				assert.Equal(t, h.Stamp, info.Stamp)
			} else {
				assert.Zero(t, info.Token)
				assert.Empty(t, info.Owner)
			}

			withoutWaiters := backend.Describe("k", tc.queue, false)
			assert.Empty(t, withoutWaiters.Waiters, "waiters not asked for")
			info.Waiters = nil
			assert.Equal(t, info, withoutWaiters, "the rest as with waiters")
		})
	}
}
