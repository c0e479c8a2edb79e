package ashlock

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
)

// uuidLen is the length of a UUID in its usual text form.
const uuidLen = 36

// idBlock is how many claim names are made, as one string, at a time.
const idBlock = 64

// claimIDs names acquisitions. Each name is a version-4 UUID: a random
// 128-bit base drawn once per client with the acquisition's sequence number
// added into its low 64 bits. Names never repeat within a client and
// collide across clients only if two random bases do.
//
// Names are formatted idBlock at a time into one string and handed out as
// substrings of it, so an acquisition costs neither a read of the kernel's
// random source nor an allocation of its own.
type claimIDs struct {
	base [16]byte

	mu    sync.Mutex
	seq   uint64
	block string // names not yet handed out start at used*uuidLen
	used  int
}

func newClaimIDs() *claimIDs {
	ids := &claimIDs{}
	if _, err := rand.Read(ids.base[:]); err != nil {
		// crypto/rand does not fail on supported platforms (Go 1.24+).
		panic("ashlock: reading random bytes: " + err.Error())
	}
	return ids
}

// next returns a fresh claim name. Safe for concurrent use.
func (ids *claimIDs) next() string {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if ids.used*uuidLen == len(ids.block) {
		buf := make([]byte, 0, idBlock*uuidLen)
		for range idBlock {
			ids.seq++
			buf = ids.appendName(buf, ids.seq)
		}
		ids.block, ids.used = string(buf), 0
	}
	name := ids.block[ids.used*uuidLen : (ids.used+1)*uuidLen]
	ids.used++
	return name
}

// appendName appends the name for sequence number seq.
func (ids *claimIDs) appendName(buf []byte, seq uint64) []byte {
	u := ids.base
	binary.BigEndian.PutUint64(u[8:], binary.BigEndian.Uint64(u[8:])+seq)
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	buf = hex.AppendEncode(buf, u[0:4])
	buf = append(buf, '-')
	buf = hex.AppendEncode(buf, u[4:6])
	buf = append(buf, '-')
	buf = hex.AppendEncode(buf, u[6:8])
	buf = append(buf, '-')
	buf = hex.AppendEncode(buf, u[8:10])
	buf = append(buf, '-')
	return hex.AppendEncode(buf, u[10:16])
}
