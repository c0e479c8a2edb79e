package etcdbackend_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// A multi-key claim that waits re-checks, before it holds, that it still
// exists at every key, not only at the key it waited at: when an operator
// deletes it at a key it held from the start, while it waits at another,
// and another client takes that key, the multi-key Acquire fails with
// ErrLeaseExpired instead of holding alongside that client, and removes
// what is left of its claim.
func TestMultiKeyWaiterLosesClaimAtHeldKey(t *testing.T) {
	tests := []struct {
		name   string
		shared bool
		stamp  func(backend.Timestamp) (backend.Timestamp, error)
	}{
		{"exclusive", false, nil},
		{"shared", true, nil},
		{"exclusive with stamps", false, nextStamp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			b, operator := newBackend(t, shared, prefix)
			holder := acquire(t, b, request("b", grant(t, b, 30*time.Second), "holder of b"))

			r := request("a", grant(t, b, 30*time.Second), "multi")
			r.Keys, r.Shared, r.Stamp = []string{"a", "b"}, tt.shared, tt.stamp
			multi := start(testCtx(t, waitBound), b, r)
			// One Txn creates the claim at both keys: it holds a and
			// waits at b.
			awaitCount(t, operator, prefix+"claims/b/", 2)
			atA := keys(t, operator, prefix+"claims/a/")
			require.Len(t, atA, 1, "the multi-key claim at a")
			notYet(t, multi, "multi-key claim waiting at b")

			_, err := operator.Delete(testCtx(t, waitBound), atA[0])
			require.NoError(t, err)
			other := acquire(t, b, request("a", grant(t, b, 30*time.Second), "other"))
			release(t, b, holder)

			got := await(t, multi, "multi-key claim deleted at a")
			require.ErrorIs(t, got.err, backend.ErrLeaseExpired,
				"multi-key Acquire whose claim at a was deleted (got token %d; other holds a with token %d)",
				got.claim.Token, other.Token)
			info, err := b.Inspect(testCtx(t, waitBound), "a")
			require.NoError(t, err)
			assert.Equal(t, other.Token, info.Token, "holder of a")
			assert.Empty(t, keys(t, operator, prefix+"claims/b/"), "left at b by the failed Acquire")
			release(t, b, other)
		})
	}
}
