package redis

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

func TestParseKeyMessage(t *testing.T) {
	owner, value := "a b\nc", "v\n1 2"
	rec := "17 5 1 0 1 0 1700000000000 0 5 " + owner + value
	bare := "17 5 1 0 1 0 1700000000000 0 0 "
	msg := "d 9 0\n" +
		"j 1500 " + strconv.Itoa(len(rec)) + "\n" + rec +
		"r -2 " + strconv.Itoa(len(bare)) + "\n" + bare +
		"v 17 5\n" + value +
		"v 17 0\n"
	m, err := parseKeyMessage(msg)
	require.NoError(t, err)
	assert.Empty(t, m.marker)
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
	r := m.changes[2]
	assert.Equal(t, time.Duration(-1), r.pttl, "a lease gone has no known end")
	assert.Empty(t, r.c.owner)
	assert.Nil(t, r.c.value)
	assert.Equal(t, []byte(value), m.changes[3].c.value)
	assert.Nil(t, m.changes[4].c.value, "an empty value")

	mk, err := parseKeyMessage("m 0f1e")
	require.NoError(t, err)
	assert.Equal(t, "0f1e", mk.marker)
	assert.Empty(t, mk.changes)

	for _, bad := range []string{
		"", "x\n", "j 1500 2\n17", "d 0 9\nab", "q 0 0\n", "d x 0\n", "d 1 1\nx",
		"j 1500 10\n17 5 1 0 1", "j 1 5\n1 2 3",
	} {
		_, err := parseKeyMessage(bad)
		assert.ErrorIs(t, err, errRecord, "%q", bad)
	}
}
