package client_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock"
)

// prefixKeys lists the etcd keys under prefix.
func prefixKeys(t *testing.T, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := cli.Get(testCtx(t), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	out := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = string(kv.Key)
	}
	return out
}

// Round 2's bad input on etcd, as TestBadInputOnEtcd (tests/chaos) does
// for keys, TTLs and seeds: shared, counted and multi-key requests and
// values out of bounds are refused with their sentinel by Acquire,
// TryAcquire, Do and Campaign, and nothing is written to etcd. The errors
// are logged, because RELIABILITY.md quotes them.
func TestBadKindsInputOnEtcd(t *testing.T) {
	prefix := uniquePrefix(t)
	cli := shared.Client(t, nil)
	c := connect(t, shared, prefix, ashlock.LockConfig{})
	ctx := testCtx(t)
	keys65 := []string{"k"}
	for i := range 64 {
		keys65 = append(keys65, fmt.Sprintf("k%d", i))
	}
	keys64 := keys65[1:]
	tests := []struct {
		name  string
		build func() *ashlock.LockBuilder
		want  []error
	}{
		{"zero permits", func() *ashlock.LockBuilder { return c.Lock("k").WithPermits(0) }, []error{ashlock.ErrInvalidConfig}},
		{"negative permits", func() *ashlock.LockBuilder { return c.Lock("k").WithPermits(-3) }, []error{ashlock.ErrInvalidConfig}},
		{"1025 permits", func() *ashlock.LockBuilder { return c.Lock("k").WithPermits(1025) }, []error{ashlock.ErrInvalidConfig}},
		{"shared with permits", func() *ashlock.LockBuilder { return c.Lock("k").Shared().WithPermits(2) }, []error{ashlock.ErrInvalidConfig}},
		{"value over 64 KiB", func() *ashlock.LockBuilder { return c.Lock("k").WithValue(make([]byte, 64<<10+1)) }, []error{ashlock.ErrInvalidConfig}},
		{"LockAll without keys", func() *ashlock.LockBuilder { return c.LockAll() }, []error{ashlock.ErrInvalidKey}},
		{"LockAll with a duplicate", func() *ashlock.LockBuilder { return c.LockAll("k", "j", "k") }, []error{ashlock.ErrInvalidKey}},
		{"LockAll with an empty key", func() *ashlock.LockBuilder { return c.LockAll("k", "") }, []error{ashlock.ErrInvalidKey}},
		{"LockAll of 65 keys", func() *ashlock.LockBuilder { return c.LockAll(keys65...) }, []error{ashlock.ErrInvalidConfig}},
		{"LockAll of 64 keys with a value over 512 KiB in all", func() *ashlock.LockBuilder {
			return c.LockAll(keys64...).WithValue(make([]byte, 8<<10+1))
		}, []error{ashlock.ErrInvalidConfig}},
		{"LockAll of 9 keys with a 64 KiB value", func() *ashlock.LockBuilder {
			return c.LockAll(keys64[:9]...).WithValue(make([]byte, 64<<10))
		}, []error{ashlock.ErrInvalidConfig}},
		{"LockAll with permits", func() *ashlock.LockBuilder { return c.LockAll("k", "j").WithPermits(2) }, []error{ashlock.ErrInvalidConfig}},
		{"shared LockAll with permits", func() *ashlock.LockBuilder { return c.LockAll("k", "j").Shared().WithPermits(2) }, []error{ashlock.ErrInvalidConfig}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, call := range []struct {
				name string
				fn   func() error
			}{
				{"Acquire", func() error {
					g, err := tt.build().Acquire(ctx)
					assert.Nil(t, g, "a guard despite bad input")
					return err
				}},
				{"TryAcquire", func() error {
					g, err := tt.build().TryAcquire(ctx)
					assert.Nil(t, g, "a guard despite bad input")
					return err
				}},
				{"Do", func() error {
					return tt.build().Do(ctx, func(context.Context, uint64) error {
						t.Error("Do ran fn despite bad input")
						return nil
					})
				}},
			} {
				err := call.fn()
				require.Error(t, err, call.name)
				for _, want := range tt.want {
					assert.ErrorIs(t, err, want, call.name)
				}
				t.Logf("%s: %v", call.name, err)
			}
			assert.Empty(t, prefixKeys(t, cli, prefix), "written to etcd despite bad input")
		})
	}
	t.Run("Campaign with a value over 64 KiB", func(t *testing.T) {
		g, err := c.Election("e").Campaign(ctx, make([]byte, 64<<10+1))
		assert.Nil(t, g)
		require.ErrorIs(t, err, ashlock.ErrInvalidConfig)
		t.Logf("Campaign: %v", err)
		err = c.Election("e").Run(ctx, make([]byte, 64<<10+1), func(context.Context, uint64) error {
			t.Error("Run called lead despite bad input")
			return nil
		})
		require.ErrorIs(t, err, ashlock.ErrInvalidConfig)
		assert.Empty(t, prefixKeys(t, cli, prefix), "written to etcd despite bad input")
	})

	// The control: a valid request of each kind does write under prefix,
	// so the emptiness above means something.
	g, err := c.LockAll("k", "j").Shared().WithValue([]byte("v")).Acquire(ctx)
	require.NoError(t, err)
	assert.Len(t, prefixKeys(t, cli, prefix), 2, "a valid LockAll")
	require.NoError(t, g.Unlock(ctx))
	assert.Empty(t, prefixKeys(t, cli, prefix))
}

// A request whose permit count differs from that of the key's holders is
// refused with ErrPermitMismatch on etcd, through Acquire, Do and (where
// the request would hold if its count matched) TryAcquire, and leaves
// nothing of its own in etcd: the key's claims are those of its holders,
// and the other key of a mismatched LockAll stays empty.
func TestPermitMismatchOnEtcd(t *testing.T) {
	prefix := uniquePrefix(t)
	cli := shared.Client(t, nil)
	c := connect(t, shared, prefix, ashlock.LockConfig{})
	ctx := testCtx(t)

	type bad struct {
		name string
		b    *ashlock.LockBuilder
		// wouldHold: the request would hold the key at once if its count
		// matched, so TryAcquire too must answer ErrPermitMismatch (and
		// not ErrLocked).
		wouldHold bool
	}
	check := func(t *testing.T, requests []bad) {
		t.Helper()
		before := prefixKeys(t, cli, prefix)
		require.NotEmpty(t, before)
		for _, r := range requests {
			calls := []struct {
				name string
				fn   func() error
			}{
				{"Acquire", func() error {
					g, err := r.b.Acquire(ctx)
					assert.Nil(t, g)
					return err
				}},
				{"Do", func() error {
					return r.b.Do(ctx, func(context.Context, uint64) error {
						t.Errorf("%s: Do ran fn despite the mismatch", r.name)
						return nil
					})
				}},
			}
			if r.wouldHold {
				calls = append(calls, struct {
					name string
					fn   func() error
				}{"TryAcquire", func() error {
					g, err := r.b.TryAcquire(ctx)
					assert.Nil(t, g)
					return err
				}})
			}
			for _, call := range calls {
				err := call.fn()
				assert.ErrorIs(t, err, ashlock.ErrPermitMismatch, "%s: %s", r.name, call.name)
				t.Logf("%s: %s: %v", r.name, call.name, err)
				assert.Equal(t, before, prefixKeys(t, cli, prefix), "%s: %s left something behind", r.name, call.name)
			}
		}
	}

	t.Run("key held with 3 permits", func(t *testing.T) {
		h, err := c.Lock("m").WithPermits(3).Acquire(ctx)
		require.NoError(t, err)
		check(t, []bad{
			{"2 permits", c.Lock("m").WithPermits(2), true},
			{"4 permits", c.Lock("m").WithPermits(4), true},
			{"exclusive", c.Lock("m"), false},
			{"shared", c.Lock("m").Shared(), false},
			{"LockAll", c.LockAll("m", "z"), false},
		})
		require.NoError(t, h.Unlock(ctx))
	})
	t.Run("key held exclusively", func(t *testing.T) {
		h, err := c.Lock("m").Acquire(ctx)
		require.NoError(t, err)
		check(t, []bad{{"3 permits", c.Lock("m").WithPermits(3), false}})
		require.NoError(t, h.Unlock(ctx))
	})
	assert.Empty(t, prefixKeys(t, cli, prefix))
}
