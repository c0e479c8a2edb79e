package redis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

func TestParseSeed(t *testing.T) {
	cases := []struct {
		seed, addr, prefix, user, password string
		db                                 int
		tls                                bool
	}{
		{seed: "redis://localhost:6379", addr: "localhost:6379", prefix: DefaultPrefix},
		{seed: "redis://h:7000/2?ashlock_prefix=billing:", addr: "h:7000", prefix: "billing:", db: 2},
		{seed: "rediss://u:p%40ss@h:6380/0?ashlock_prefix=a%2Fb&dial_timeout=3s", addr: "h:6380", prefix: "a/b", user: "u", password: "p@ss", tls: true},
	}
	for _, c := range cases {
		t.Run(c.seed, func(t *testing.T) {
			opts, prefix, err := ParseSeed(c.seed)
			require.NoError(t, err)
			assert.Equal(t, c.addr, opts.Addr)
			assert.Equal(t, c.prefix, prefix)
			assert.Equal(t, c.db, opts.DB)
			assert.Equal(t, c.user, opts.Username)
			assert.Equal(t, c.password, opts.Password)
			assert.Equal(t, c.tls, opts.TLSConfig != nil)
		})
	}
}

func TestParseSeedRefusesBadSeeds(t *testing.T) {
	for _, seed := range []string{
		"redis://h/0?ashlock_prefix=a{b",
		"redis://h/0?ashlock_prefix=",
		"redis://h/0?ashlock_prefix=a&ashlock_prefix=b",
		"redis://h/0?no_such_option=1",
		"redis://h/notadb",
		"http://h",
		"redis://u:secret@h:bad port",
	} {
		_, _, err := ParseSeed(seed)
		assert.ErrorIs(t, err, backend.ErrInvalidConfig, seed)
		if err != nil {
			assert.NotContains(t, err.Error(), "secret", "the error repeats a password")
		}
	}
}

func TestSeedsAreRegistered(t *testing.T) {
	for _, s := range []string{"redis://h", "rediss://h"} {
		_, ok := backend.LookupSeed(s)
		assert.True(t, ok, s)
	}
}
