package redis

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

func TestPrefixesThatBreakTheHashTagAreRefused(t *testing.T) {
	for _, p := range []string{"", "a{b", "a}b", "{", "}", "x\ny", string(make([]byte, maxPrefixLen+1)), "\xff"} {
		_, err := newLayout(p)
		assert.ErrorIs(t, err, backend.ErrInvalidConfig, "prefix %q", p)
	}
	for _, p := range []string{"ashlock:", "a*b?[c]\\", "über:", " spaced "} {
		l, err := newLayout(p)
		require.NoError(t, err, "prefix %q", p)
		assert.Equal(t, "{"+p+"}", l.tag)
	}
}

func TestLeaseNotificationPatternEscapesGlobs(t *testing.T) {
	l, err := newLayout(`a*b?[c]\`)
	require.NoError(t, err)
	assert.Equal(t, `__keyspace@3__:{a\*b\?\[c\]\\}lease:*`, l.leaseSpace(3))
	id, ok := l.leaseOf(`__keyspace@3__:{a*b?[c]\}lease:42`)
	assert.True(t, ok)
	assert.Equal(t, backend.LeaseID(42), id)
	for _, ch := range []string{
		`__keyspace@3__:{other}lease:42`, `__keyspace@3__:{a*b?[c]\}lease:x`,
		`__keyspace@3__:{a*b?[c]\}lease:-1`, `__keyspace@3__:{a*b?[c]\}leases`, "garbage",
	} {
		_, ok := l.leaseOf(ch)
		assert.False(t, ok, ch)
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	st := backend.Timestamp{WallTime: 1_700_000_000_000_000_000, Logical: 7}
	var q queued
	require.NoError(t, parseRecord("1796314896663170 12 3 0 1 2 1764777000123 "+formatStamp(st)+" 4 host v 1", &q))
	assert.Equal(t, uint64(1796314896663170), q.token)
	assert.Equal(t, backend.LeaseID(12), q.lease)
	assert.Equal(t, backend.Kind{Permits: 3}, q.kind)
	assert.True(t, q.admitted)
	assert.Equal(t, 2, q.permit)
	assert.Equal(t, int64(1764777000123), q.at.UnixMilli())
	assert.Equal(t, st, q.stamp)
	assert.Equal(t, "host", q.owner, "the owner is its length's bytes after the fields")
	assert.Equal(t, []byte(" v 1"), q.value, "the value is every byte after the owner")

	require.NoError(t, parseRecord("5 1 1 1 0 -1 0 0 0 ", &q))
	assert.Equal(t, backend.Kind{Permits: 1, Shared: true}, q.kind)
	assert.False(t, q.admitted)
	assert.Equal(t, backend.NoPermit, q.permit)
	assert.Equal(t, backend.Timestamp{}, q.stamp)
	assert.Empty(t, q.owner)
	assert.Nil(t, q.value, "no value")

	for _, bad := range []string{
		"", "1 2 3", "a 1 1 0 0 -1 0 0 0 ", "1 1 1 0 0 -1 0 zz 0 ", "1 1 1 0 0 -1 0 0 9 ab", "1 1 1 0 0 -1 0 0 0", "1 1 1 0 0 -1 0 0 -1 x",
	} {
		assert.True(t, errors.Is(parseRecord(bad, &q), errRecord), "record %q", bad)
	}
}

func TestStampsSortAsBytes(t *testing.T) {
	a := formatStamp(backend.Timestamp{WallTime: 1, Logical: 0xffffffff})
	b := formatStamp(backend.Timestamp{WallTime: 2})
	c := formatStamp(backend.Timestamp{WallTime: 2, Logical: 1})
	assert.Less(t, a, b)
	assert.Less(t, b, c)
	assert.Equal(t, "0", formatStamp(backend.Timestamp{}))
}

func TestClaimIDs(t *testing.T) {
	assert.NoError(t, checkID("6f1c2a4e-1b7d-4f7e-9c1a-2b3c4d5e6f70"))
	for _, id := range []string{"a:b", "a\nb", string(make([]byte, maxIDLen+1))} {
		assert.ErrorIs(t, checkID(id), backend.ErrInvalidConfig, "id %q", id)
	}
}

// FuzzParseRecord: any record text is read or refused, never a panic, and
// a claim is never read with fewer than one permit.
func FuzzParseRecord(f *testing.F) {
	f.Add("1796314896663170 12 3 0 1 2 1764777000123 0 3 abcvalue")
	f.Add("5 1 1 1 0 -1 0 " + formatStamp(backend.Timestamp{WallTime: 9, Logical: 3}) + " 0 ")
	f.Fuzz(func(t *testing.T, s string) {
		var q queued
		if err := parseRecord(s, &q); err != nil {
			return
		}
		if q.kind.Permits < 1 {
			t.Errorf("record %q read with %d permits", s, q.kind.Permits)
		}
	})
}

func TestRouteChannels(t *testing.T) {
	plain, err := newLayout("app:")
	require.NoError(t, err)
	assert.Nil(t, plain.routeChannels(), "the pattern's hash tag is the prefix's: it routes the connection")
	for _, p := range []string{"a*", "a?", "a[b]", `a\`} {
		l, err := newLayout(p)
		require.NoError(t, err)
		assert.Equal(t, []string{"{" + p + "}route"}, l.routeChannels(), p)
	}
}
