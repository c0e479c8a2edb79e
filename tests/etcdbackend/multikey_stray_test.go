package etcdbackend_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// A multi-key request that does not queue (TryAcquire, or Fair false)
// and finds, at one of its keys, a claim under the name it uses - a write
// of an earlier acquisition under that name applied after its sender gave
// up on it - does not take that stray for a claim that blocks it: it
// removes it and takes the keys, which nothing else holds.
func TestMultiKeyNonQueuedRemovesStrayUnderItsName(t *testing.T) {
	tests := []struct {
		name         string
		shared, wait bool
	}{
		{"TryAcquire", false, false},
		{"Fair false", false, true},
		{"shared TryAcquire", true, false},
		{"shared Fair false", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			b, operator := newBackend(t, shared, prefix)
			l := grant(t, b, 30*time.Second)
			multi := func(owner string) backend.AcquireRequest {
				r := request("a", l, owner)
				r.Keys, r.Shared = []string{"a", "b"}, tt.shared
				return r
			}
			first := acquire(t, b, multi("first"))
			release(t, b, first)
			// first's name is free again, and the next Acquire uses it.
			put, err := operator.Put(testCtx(t, waitBound), prefix+"claims/b/"+first.ID, "",
				clientv3.WithLease(clientv3.LeaseID(l.ID)))
			require.NoError(t, err)

			r := multi("next")
			r.Fair, r.Wait = false, tt.wait
			c, err := b.Acquire(testCtx(t, waitBound), r)
			require.NoError(t, err, "non-queued LockAll over a stray under its name at b")
			assert.Equal(t, first.ID, c.ID, "claim name")
			assert.Greater(t, c.Token, uint64(put.Header.Revision), "token: a new claim, made after the stray")
			assert.ElementsMatch(t, []string{prefix + "claims/a/" + c.ID, prefix + "claims/b/" + c.ID},
				keys(t, operator, prefix+"claims/"), "claims while held")
			release(t, b, c)
			assert.Empty(t, keys(t, operator, prefix+"claims/"), "claims left")
		})
	}
}

// The Txn of a non-queued multi-key request reads what blocks it and its
// own name at every key: at backend.MaxKeys keys that is etcd's default
// limit of 128 operations per list, and a blocked TryAcquire still gets
// ErrLocked, not a refused request.
func TestMultiKeyNonQueuedBlockedAtMaxKeys(t *testing.T) {
	prefix := uniquePrefix(t)
	b, operator := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	all := numberedKeys(backend.MaxKeys)
	h := acquire(t, b, request(all[40], l, "holder"))
	for _, sharedClaim := range []bool{false, true} {
		r := request(all[0], l, "all")
		r.Keys, r.Shared, r.Wait = all, sharedClaim, false
		_, err := b.Acquire(testCtx(t, waitBound), r)
		assert.ErrorIs(t, err, backend.ErrLocked, "shared %v", sharedClaim)
	}
	release(t, b, h)
	assert.Empty(t, keys(t, operator, prefix+"claims/"), "claims left")
}
