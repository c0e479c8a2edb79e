package redis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

func TestParseKeyMessage(t *testing.T) {
	rec := "17 5 1 0 1 0 1700000000000 0"
	owner, value := "a b\nc", "v\n1 2"
	msg := "42\n" +
		"d 0 0 9\n" +
		"j 5 5 1500 " + rec + "\n" + owner + value +
		"r 0 0 -2 " + rec + "\n" +
		"v 0 5 17\n" + value +
		"v 0 0 17\n"
	m, err := parseKeyMessage(msg)
	require.NoError(t, err)
	assert.Equal(t, uint64(42), m.order)
	require.Len(t, m.changes, 5)
	assert.Equal(t, byte('d'), m.changes[0].kind)
	assert.Equal(t, uint64(9), m.changes[0].c.token)
	j := m.changes[1]
	assert.Equal(t, byte('j'), j.kind)
	assert.Equal(t, uint64(17), j.c.token)
	assert.Equal(t, backend.LeaseID(5), j.c.lease)
	assert.True(t, j.c.admitted)
	assert.Equal(t, owner, j.c.owner)
	assert.Equal(t, []byte(value), j.c.value)
	assert.Equal(t, 1500*time.Millisecond, j.pttl)
	assert.Equal(t, time.Duration(-1), m.changes[2].pttl, "a lease gone has no known end")
	assert.Equal(t, []byte(value), m.changes[3].c.value)
	assert.Nil(t, m.changes[4].c.value, "an empty value")

	for _, bad := range []string{"", "x\n", "1\nj 0 0 1500 17\n", "1\nd 0 9 1\nab", "1\nq 0 0 1\n", "1\nd 0 0 x\n"} {
		_, err := parseKeyMessage(bad)
		assert.ErrorIs(t, err, errRecord, "%q", bad)
	}
}
