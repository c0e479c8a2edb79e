package backend_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

func TestCheckKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  string
		ok   bool
	}{
		{"plain", "orders/42", true},
		{"non-ASCII", "crème/brûlée", true},
		{"longest", strings.Repeat("k", backend.MaxKeyLen), true},
		{"empty", "", false},
		{"too long", strings.Repeat("k", backend.MaxKeyLen+1), false},
		{"not UTF-8", "a\xffb", false},
		{"control character", "a\nb", false},
		{"C1 control character", "a\u0085b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := backend.CheckKey(tc.key)
			if tc.ok {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, backend.ErrInvalidKey)
			assert.NotErrorIs(t, err, backend.ErrInvalidConfig)
		})
	}
}

func TestCheckOwner(t *testing.T) {
	assert.NoError(t, backend.CheckOwner(""))
	assert.NoError(t, backend.CheckOwner(strings.Repeat("o", backend.MaxOwnerLen)))
	assert.ErrorIs(t, backend.CheckOwner(strings.Repeat("o", backend.MaxOwnerLen+1)), backend.ErrInvalidConfig)
	assert.ErrorIs(t, backend.CheckOwner("a\xff"), backend.ErrInvalidConfig)
}

// problem is one error CheckRequest should report: the sentinel it wraps
// and a fragment of its text.
type problem struct {
	sentinel error
	says     string
}

func TestCheckRequest(t *testing.T) {
	key, cfg := backend.ErrInvalidKey, backend.ErrInvalidConfig
	for _, tc := range []struct {
		name string
		req  backend.AcquireRequest
		want []problem
	}{
		{name: "plain", req: backend.AcquireRequest{Key: "k"}},
		{name: "shared", req: backend.AcquireRequest{Key: "k", Shared: true, Permits: 1}},
		{name: "counted", req: backend.AcquireRequest{Key: "k", Permits: backend.MaxPermits}},
		{name: "multi-key", req: backend.AcquireRequest{Key: "a", Keys: []string{"a", "b", "c"}, Permits: 1}},
		{name: "longest value", req: backend.AcquireRequest{Key: "k", Value: make([]byte, backend.MaxValueLen)}},
		{
			name: "empty key",
			req:  backend.AcquireRequest{},
			want: []problem{{key, "empty"}},
		},
		{
			name: "bad key in Keys",
			req:  backend.AcquireRequest{Key: "a", Keys: []string{"a", "b\x00"}},
			want: []problem{{key, "control character"}},
		},
		{
			name: "no keys",
			req:  backend.AcquireRequest{Key: "a", Keys: []string{}},
			want: []problem{{key, "without keys"}},
		},
		{
			name: "too many keys",
			req:  backend.AcquireRequest{Key: "k00", Keys: keys(backend.MaxKeys + 1)},
			want: []problem{{cfg, "keys, more than"}},
		},
		{
			name: "Keys[0] is not Key",
			req:  backend.AcquireRequest{Key: "a", Keys: []string{"b", "c"}},
			want: []problem{{cfg, "Keys[0]"}},
		},
		{
			name: "keys out of order and repeated",
			req:  backend.AcquireRequest{Key: "a", Keys: []string{"a", "c", "b", "b"}},
			want: []problem{{key, `"c" before "b"`}, {key, `"b" before "b"`}},
		},
		{
			name: "negative permits",
			req:  backend.AcquireRequest{Key: "k", Permits: -1},
			want: []problem{{cfg, "-1 permits"}},
		},
		{
			name: "too many permits",
			req:  backend.AcquireRequest{Key: "k", Permits: backend.MaxPermits + 1},
			want: []problem{{cfg, "permits"}},
		},
		{
			name: "shared and counted",
			req:  backend.AcquireRequest{Key: "k", Shared: true, Permits: 2},
			want: []problem{{cfg, "shared lock with 2 permits"}},
		},
		{
			name: "multi-key and counted",
			req:  backend.AcquireRequest{Key: "a", Keys: []string{"a"}, Permits: 2},
			want: []problem{{cfg, "multi-key lock with 2 permits"}},
		},
		{
			name: "value too long",
			req:  backend.AcquireRequest{Key: "k", Value: make([]byte, backend.MaxValueLen+1)},
			want: []problem{{cfg, "value"}},
		},
		{
			name: "value too long for all the keys",
			req:  backend.AcquireRequest{Key: "k00", Keys: keys(9), Value: make([]byte, backend.MaxValueLen)},
			want: []problem{{cfg, "in all"}},
		},
		{
			name: "owner label too long",
			req:  backend.AcquireRequest{Key: "k", Owner: strings.Repeat("o", backend.MaxOwnerLen+1)},
			want: []problem{{cfg, "owner label"}},
		},
		{
			name: "every problem at once",
			req: backend.AcquireRequest{
				Key: "b", Keys: []string{"a", "\x01", "\x01"}, Shared: true, Permits: 3,
				Value: make([]byte, backend.MaxValueLen+1), Owner: "\xff",
			},
			want: []problem{
				{cfg, "Keys[0]"},
				{key, "control character"}, {key, `"a" before "\x01"`},
				{key, "control character"}, {key, `"\x01" before "\x01"`},
				{cfg, "shared lock with 3 permits"},
				{cfg, "value"},
				{cfg, "owner label"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := backend.CheckRequest(&tc.req)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			var got []error
			if joined, ok := err.(interface{ Unwrap() []error }); ok {
				got = joined.Unwrap()
			}
			require.Len(t, got, len(tc.want), "one error per problem: %v", err)
			for i, p := range tc.want {
				assert.ErrorIs(t, got[i], p.sentinel, "problem %d: %v", i, got[i])
				other := map[error]error{key: cfg, cfg: key}[p.sentinel]
				assert.NotErrorIs(t, got[i], other, "problem %d wraps one sentinel: %v", i, got[i])
				assert.Contains(t, got[i].Error(), p.says, "problem %d", i)
			}
			assert.True(t, errors.Is(err, tc.want[0].sentinel))
		})
	}
}

// TestCheckRequestEveryByte: CheckRequest settles most single-key
// requests by a quicker path than the full check; for every byte in a key
// or an owner label, at the start, in the middle and at the end, it agrees
// with CheckKey and CheckOwner, which take none.
func TestCheckRequestEveryByte(t *testing.T) {
	for c := range 256 {
		b := string([]byte{byte(c)})
		for _, s := range []string{b, string(rune(c)), b + "k", "k" + b + "k", "k" + b, b + "\x00"} {
			keyErr := backend.CheckRequest(&backend.AcquireRequest{Key: s})
			if want := backend.CheckKey(s); want == nil {
				assert.NoError(t, keyErr, "key %q", s)
			} else {
				assert.ErrorIs(t, keyErr, backend.ErrInvalidKey, "key %q", s)
			}
			ownerErr := backend.CheckRequest(&backend.AcquireRequest{Key: "k", Owner: s})
			if want := backend.CheckOwner(s); want == nil {
				assert.NoError(t, ownerErr, "owner %q", s)
			} else {
				assert.ErrorIs(t, ownerErr, backend.ErrInvalidConfig, "owner %q", s)
			}
		}
	}
	assert.NoError(t, backend.CheckRequest(&backend.AcquireRequest{Key: "k", Owner: "crème:42"}))
	assert.NoError(t, backend.CheckRequest(&backend.AcquireRequest{Key: strings.Repeat("k", backend.MaxKeyLen), Owner: strings.Repeat("o", backend.MaxOwnerLen)}))
	assert.ErrorIs(t, backend.CheckRequest(&backend.AcquireRequest{Key: "k", Owner: strings.Repeat("o", backend.MaxOwnerLen+1)}), backend.ErrInvalidConfig)
	assert.ErrorIs(t, backend.CheckRequest(&backend.AcquireRequest{Key: "k", Value: make([]byte, backend.MaxValueLen+1)}), backend.ErrInvalidConfig)
}

// keys returns n sorted, distinct keys k00, k01, ...
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "k" + string(rune('0'+i/10)) + string(rune('0'+i%10))
	}
	return out
}
