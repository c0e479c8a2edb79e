package backend_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"

	"github.com/ash-lock/ashlock/backend"
)

func TestClaimNamesAreUniqueAndTheirOwn(t *testing.T) {
	a, b := backend.NewClaimNames(), backend.NewClaimNames()
	seen := map[string]bool{}
	for range 100 {
		for _, n := range []*backend.ClaimNames{a, b} {
			name := n.New()
			assert.False(t, seen[name], "name %q made twice", name)
			seen[name] = true
			assert.True(t, n.Made(name))
		}
	}
	assert.False(t, a.Made(b.New()), "a name of another ClaimNames taken for one's own")
	assert.False(t, a.Made(uuid.NewString()), "a caller's UUID taken for one's own")
	assert.False(t, a.Made(""))
}
