package memory_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// Request builders for the kinds of claim: each returns a fair, waiting
// request with a unique ID, like request.

func sharedReq(key string, l backend.Lease, owner string) backend.AcquireRequest {
	r := request(key, l, owner)
	r.Shared = true
	return r
}

func countedReq(key string, l backend.Lease, owner string, n int) backend.AcquireRequest {
	r := request(key, l, owner)
	r.Permits = n
	return r
}

// multiReq asks for every key of keys, which must be sorted and distinct.
func multiReq(l backend.Lease, owner string, keys ...string) backend.AcquireRequest {
	r := request(keys[0], l, owner)
	r.Keys = keys
	return r
}

func try(r backend.AcquireRequest) backend.AcquireRequest {
	r.Wait = false
	return r
}

func unfair(r backend.AcquireRequest) backend.AcquireRequest {
	r.Fair = false
	return r
}

// holders returns the owners of key's holders, oldest first.
func holders(t *testing.T, b *memory.Backend, key string) []string {
	t.Helper()
	var owners []string
	for _, h := range inspect(t, b, key).Holders {
		owners = append(owners, h.Owner)
	}
	return owners
}

// waiters returns the owners of key's queued waiters, in queue order.
func waiters(t *testing.T, b *memory.Backend, key string) []string {
	t.Helper()
	var owners []string
	for _, w := range inspect(t, b, key).Waiters {
		owners = append(owners, w.Owner)
	}
	return owners
}

// requireFree checks that nothing at all is left at key.
func requireFree(t *testing.T, b *memory.Backend, key string) {
	t.Helper()
	info := inspect(t, b, key)
	require.Equal(t, backend.LockInfo{Key: key}, info, "Inspect %q: want a free key with nothing queued", key)
}

// mustGet waits for a background Acquire and requires it to succeed.
func (p *bg) mustGet(t *testing.T) backend.Claim {
	t.Helper()
	c, err := p.wait(t)
	require.NoError(t, err)
	return c
}

var errLocked = backend.ErrLocked
