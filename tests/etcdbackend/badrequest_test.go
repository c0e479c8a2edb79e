package etcdbackend_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// The etcd backend checks a request itself (backend.CheckRequest), so
// that a caller using the Backend directly, without the root package's
// validation, cannot store a claim its peers cannot read. Each bad request
// is refused, waiting or not, fair or not, with an error naming the
// problem and wrapping ErrInvalidKey or ErrInvalidConfig, and none of the
// sentinels a caller might retry on, and nothing is written under the
// prefix. A valid request built the same way does
// write, so the emptiness means something.
func TestAcquireRefusesBadRequestOnEtcd(t *testing.T) {
	// A request is built on the lease of its own backend and prefix, so
	// that a row that does write cannot make the next ones fail.
	type build func(backend.Lease) backend.AcquireRequest
	single := func(edit func(*backend.AcquireRequest)) build {
		return func(l backend.Lease) backend.AcquireRequest {
			r := request("k00", l, "bad")
			edit(&r)
			return r
		}
	}
	multiKey := func(keys []string, edit func(*backend.AcquireRequest)) build {
		return func(l backend.Lease) backend.AcquireRequest {
			r := request(keys[0], l, "bad")
			r.Keys = keys
			edit(&r)
			return r
		}
	}
	none := func(*backend.AcquireRequest) {}
	tests := []struct {
		name string
		req  build
		text string // in the error
		is   error  // the sentinel the error wraps
	}{
		{"empty key", single(func(r *backend.AcquireRequest) { r.Key = "" }), "invalid key: empty", backend.ErrInvalidKey},
		{"no lease", single(func(r *backend.AcquireRequest) { r.Lease = 0 }), "no lease", backend.ErrLeaseExpired},
		{"-1 permits", single(func(r *backend.AcquireRequest) { r.Permits = -1 }), "-1 permits", backend.ErrInvalidConfig},
		{"1025 permits", single(func(r *backend.AcquireRequest) { r.Permits = backend.MaxPermits + 1 }), "1025 permits", backend.ErrInvalidConfig},
		{"shared with 2 permits", single(func(r *backend.AcquireRequest) { r.Shared, r.Permits = true, 2 }), "a shared lock with 2 permits", backend.ErrInvalidConfig},
		{"value over 64 KiB", single(func(r *backend.AcquireRequest) { r.Value = make([]byte, backend.MaxValueLen+1) }), "value of 65537 bytes, more than 65536", backend.ErrInvalidConfig},
		{"empty key set", single(func(r *backend.AcquireRequest) { r.Keys = []string{} }), "a multi-key request without keys", backend.ErrInvalidKey},
		{"65 keys", multiKey(numberedKeys(backend.MaxKeys+1), none), "65 keys", backend.ErrInvalidConfig},
		{"Keys[0] not Key", multiKey([]string{"k01", "k02"}, func(r *backend.AcquireRequest) { r.Key = "k00" }), `Keys[0] is "k01", not Key "k00"`, backend.ErrInvalidConfig},
		{"duplicated keys", multiKey([]string{"k00", "k01", "k01"}, none), `keys not sorted and distinct: "k01" before "k01"`, backend.ErrInvalidKey},
		{"the same key twice", multiKey([]string{"k00", "k00"}, none), `keys not sorted and distinct: "k00" before "k00"`, backend.ErrInvalidKey},
		{"keys not sorted", multiKey([]string{"k01", "k00"}, none), `keys not sorted and distinct: "k01" before "k00"`, backend.ErrInvalidKey},
		{"multi-key with 2 permits", multiKey(numberedKeys(2), func(r *backend.AcquireRequest) { r.Permits = 2 }), "a multi-key lock with 2 permits", backend.ErrInvalidConfig},
		{"64 keys with a value over 512 KiB in all", multiKey(numberedKeys(backend.MaxKeys), func(r *backend.AcquireRequest) {
			r.Value = make([]byte, backend.MaxValueTotal/backend.MaxKeys+1)
		}), "value of 8193 bytes on 64 keys, more than 524288 bytes in all", backend.ErrInvalidConfig},
		{"9 keys with a 64 KiB value", multiKey(numberedKeys(9), func(r *backend.AcquireRequest) {
			r.Value = make([]byte, backend.MaxValueLen)
		}), "value of 65536 bytes on 9 keys", backend.ErrInvalidConfig},
	}
	modes := []struct {
		name       string
		wait, fair bool
	}{{"Acquire", true, true}, {"TryAcquire", false, true}, {"unfair Acquire", true, false}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			b, cli := newBackend(t, shared, prefix)
			l := grant(t, b, 30*time.Second)
			for _, m := range modes {
				req := tt.req(l)
				req.Wait, req.Fair = m.wait, m.fair
				c, err := b.Acquire(testCtx(t, waitBound), req)
				require.Error(t, err, m.name)
				assert.Zero(t, c, "%s: a claim despite the bad request", m.name)
				assert.ErrorContains(t, err, tt.text, m.name)
				assert.ErrorIs(t, err, tt.is, m.name)
				for _, retry := range []error{backend.ErrLocked, backend.ErrUnavailable, backend.ErrLeaseExpired, backend.ErrPermitMismatch, backend.ErrClosed} {
					if retry != tt.is {
						assert.NotErrorIs(t, err, retry, m.name)
					}
				}
				assert.Empty(t, keys(t, cli, prefix), "%s: written to etcd despite the bad request", m.name)
			}
		})
	}

	// The control: the largest valid multi-key request writes a claim at
	// each key.
	prefix := uniquePrefix(t)
	b, cli := newBackend(t, shared, prefix)
	ok := multiKey(numberedKeys(backend.MaxKeys), func(r *backend.AcquireRequest) {
		r.Value = make([]byte, backend.MaxValueTotal/backend.MaxKeys)
	})
	c := acquire(t, b, ok(grant(t, b, 30*time.Second)))
	assert.Len(t, keys(t, cli, prefix), backend.MaxKeys)
	release(t, b, c)
	assert.Empty(t, keys(t, cli, prefix))
}
