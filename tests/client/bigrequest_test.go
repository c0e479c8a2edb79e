package client_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
)

// LockAll at the limits, through the public API on etcd: the most keys
// allowed, each of the longest length allowed and made of the byte the
// etcd key escaping expands, under the longest prefix allowed, with
// stamps on and the largest value allowed. TryAcquire (held, then free),
// Acquire after a wait, SetValue and Unlock all work, exclusive and
// shared; nothing but stamp records is left behind.
func TestLockAllAtTheLimits(t *testing.T) {
	keys := make([]string, backend.MaxKeys)
	for i := range keys {
		k := fmt.Sprintf("%02d", i)
		keys[i] = k + strings.Repeat("/", 1024-len(k))
	}
	value := make([]byte, backend.MaxValueTotal/len(keys))
	for _, sharedLock := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared %v", sharedLock), func(t *testing.T) {
			p := uniquePrefix(t)
			prefix := p[:len(p)-1] + strings.Repeat("_", 256-len(p)) + "/"
			cli := shared.Client(t, nil)
			b, err := etcd.New(cli, etcd.WithPrefix(prefix))
			require.NoError(t, err)
			t.Cleanup(func() { b.Close() })
			c, err := ashlock.ConnectWith(testCtx(t), ashlock.LockConfig{Stamps: true, Logger: quiet}, b)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close(testCtx(t)) })
			ctx := testCtx(t)
			all := func() *ashlock.LockBuilder {
				lb := c.LockAll(keys...).WithValue(value).WithOwner(strings.Repeat("o", 256))
				if sharedLock {
					lb = lb.Shared()
				}
				return lb
			}

			h, err := c.Lock(keys[len(keys)-1]).Acquire(ctx)
			require.NoError(t, err)
			_, err = all().TryAcquire(ctx)
			require.ErrorIs(t, err, ashlock.ErrLocked, "TryAcquire of held keys")
			errc := make(chan error, 1)
			go func() {
				g, err := all().Acquire(ctx)
				if err == nil {
					err = g.Unlock(ctx)
				}
				errc <- err
			}()
			waitWaiters(t, c, prefix, keys[len(keys)-1], 1)
			require.NoError(t, h.Unlock(ctx))
			select {
			case err := <-errc:
				require.NoError(t, err, "LockAll after a wait")
			case <-time.After(waitBound):
				t.Fatal("LockAll did not return after the holder unlocked")
			}

			g, err := all().TryAcquire(ctx)
			require.NoError(t, err, "TryAcquire of free keys")
			_, ok := g.Stamp()
			assert.True(t, ok, "stamp with Stamps on")
			require.NoError(t, g.SetValue(ctx, value))
			info, err := c.Inspect(ctx, keys[len(keys)-1])
			require.NoError(t, err)
			require.Len(t, info.Holders, 1)
			assert.Equal(t, value, info.Holders[0].Value)
			require.NoError(t, g.Unlock(ctx))
			assert.Equal(t, int64(0), keysUnder(t, cli, prefix+"claims/"), "claims left")
		})
	}
}
