package etcdbackend_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// A multi-key claim stores its value at every key, so its value is bounded
// in all (backend.MaxValueTotal). The largest value allowed works on every
// path that writes it - the enqueue, a wait, the stamps, SetValue - even at
// backend.MaxKeys keys, well inside etcd's request size limit; one byte
// more is refused before anything reaches etcd, not by etcd, and leaves
// nothing behind.
func TestMultiKeyLargestValue(t *testing.T) {
	for _, n := range []int{backend.MaxValueTotal / backend.MaxValueLen, backend.MaxKeys} {
		t.Run(fmt.Sprintf("%d keys", n), func(t *testing.T) {
			prefix := uniquePrefix(t)
			b, operator := newBackend(t, shared, prefix)
			l := grant(t, b, 30*time.Second)
			all := numberedKeys(n)
			largest := backend.MaxValueTotal / n
			r := request(all[0], l, "all")
			r.Keys, r.Value = all, make([]byte, largest)
			r.Stamp = nextStamp

			h := acquire(t, b, request(all[n-1], l, "holder"))
			ch := start(testCtx(t, waitBound), b, r)
			awaitCount(t, operator, prefix+"claims/"+all[n-1]+"/", 2)
			release(t, b, h)
			got := await(t, ch, "LockAll with the largest value")
			require.NoError(t, got.err, "LockAll of %d keys with a %d-byte value", n, largest)
			require.NoError(t, b.SetValue(testCtx(t, waitBound), got.claim, make([]byte, largest)))
			err := b.SetValue(testCtx(t, waitBound), got.claim, make([]byte, largest+1))
			require.Error(t, err, "SetValue of %d bytes on %d keys", largest+1, n)
			assert.NotErrorIs(t, err, backend.ErrUnavailable, "refused by etcd, not up front")
			info, err := b.Inspect(testCtx(t, waitBound), all[n-1])
			require.NoError(t, err)
			require.Len(t, info.Holders, 1)
			assert.Len(t, info.Holders[0].Value, largest, "value after a refused SetValue")
			release(t, b, got.claim)

			r.Value = make([]byte, largest+1)
			_, err = b.Acquire(testCtx(t, waitBound), r)
			require.Error(t, err, "LockAll of %d keys with a %d-byte value", n, largest+1)
			assert.NotErrorIs(t, err, backend.ErrUnavailable, "refused by etcd, not up front")
			assert.Empty(t, keys(t, operator, prefix+"claims/"), "claims left")
		})
	}
}
