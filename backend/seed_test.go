package backend_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// schemes numbers the schemes the tests register: the registry is the
// process's, so a test run twice (-count) needs new names.
var schemes atomic.Int64

func newScheme() string { return fmt.Sprintf("seedtest%d", schemes.Add(1)) }

func nopOpener(context.Context, string) (backend.Backend, func() error, error) {
	return nil, func() error { return nil }, nil
}

func TestRegisterSeedThenLookup(t *testing.T) {
	scheme := newScheme()
	opened := ""
	backend.RegisterSeed(scheme, func(_ context.Context, seed string) (backend.Backend, func() error, error) {
		opened = seed
		return nil, func() error { return nil }, nil
	})

	open, ok := backend.LookupSeed(scheme + "://host:1/prefix/")
	require.True(t, ok)
	_, closeAll, err := open(t.Context(), scheme+"://host:1/prefix/")
	require.NoError(t, err)
	require.NoError(t, closeAll())
	assert.Equal(t, scheme+"://host:1/prefix/", opened)
}

func TestLookupSeedMisses(t *testing.T) {
	scheme := newScheme()
	backend.RegisterSeed(scheme, nopOpener)
	for _, tc := range []struct{ name, seed string }{
		{"unregistered scheme", newScheme() + "://h/"},
		{"no scheme", scheme},
		{"scheme without ://", scheme + ":h"},
		{"empty", ""},
		{"built-in memory", "memory://"},
		{"built-in etcd", "etcd://h:2379/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open, ok := backend.LookupSeed(tc.seed)
			assert.False(t, ok)
			assert.Nil(t, open)
		})
	}
}

func TestRegisterSeedPanics(t *testing.T) {
	taken := newScheme()
	backend.RegisterSeed(taken, nopOpener)
	for _, tc := range []struct {
		name   string
		scheme string
		open   backend.SeedOpener
	}{
		{"twice", taken, nopOpener},
		{"empty scheme", "", nopOpener},
		{"nil opener", newScheme(), nil},
		{"built-in memory", "memory", nopOpener},
		{"built-in etcd", "etcd", nopOpener},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Panics(t, func() { backend.RegisterSeed(tc.scheme, tc.open) })
		})
	}
	_, ok := backend.LookupSeed(taken + "://")
	assert.True(t, ok, "a refused second registration leaves the first")
}
