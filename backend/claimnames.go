package backend

import (
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"strings"
	"sync/atomic"
)

// ClaimNames makes the names of the claims a ClaimNamer names: a random
// base drawn once, then a count, about a third of a UUID's length (a name
// is stored and deleted several times per acquisition in some stores).
// Names are unique among one ClaimNames' by the count, and across them as
// long as no two draw the same 72-bit base; Made tells a claim named here
// from one named elsewhere (a caller's ID, another Backend's claim).
// Safe for concurrent use.
type ClaimNames struct {
	base string
	made atomic.Uint64
}

// NewClaimNames returns a ClaimNames with a base of its own.
func NewClaimNames() *ClaimNames {
	var b [9]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return &ClaimNames{base: base64.RawURLEncoding.EncodeToString(b[:])}
}

// New returns a name no earlier call of n returned.
func (n *ClaimNames) New() string { return n.base + strconv.FormatUint(n.made.Add(1), 36) }

// Base returns the random base every name n makes begins with (12
// characters).
func (n *ClaimNames) Base() string { return n.base }

// Made reports whether n made name.
func (n *ClaimNames) Made(name string) bool {
	return len(name) > len(n.base) && strings.HasPrefix(name, n.base)
}
