package ashlock

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"

	"github.com/google/uuid"
)

// claimIDs names acquisitions. Each name is a version-4 UUID: a random
// 128-bit base drawn once per client with the acquisition's sequence number
// added into its low 64 bits. Names never repeat within a client, collide
// across clients only if two random bases do, and cost no system call per
// acquisition (uuid.New reads the kernel's random source every time).
type claimIDs struct {
	base [16]byte
	seq  atomic.Uint64
}

func newClaimIDs() *claimIDs {
	ids := &claimIDs{}
	if _, err := rand.Read(ids.base[:]); err != nil {
		// crypto/rand does not fail on supported platforms (Go 1.24+).
		panic("ashlock: reading random bytes: " + err.Error())
	}
	return ids
}

// next returns a fresh claim name.
func (ids *claimIDs) next() string {
	var u uuid.UUID = ids.base
	lo := binary.BigEndian.Uint64(u[8:]) + ids.seq.Add(1)
	binary.BigEndian.PutUint64(u[8:], lo)
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return u.String()
}
