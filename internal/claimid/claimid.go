// Package claimid makes claim names: version-4 UUIDs, cheap enough to make
// one per acquisition. The client names the claims of backends that do not
// name their own (see backend.ClaimNamer); backend/memory names its claim
// records with it.
package claimid

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

// Source makes claim names. Each name is a version-4 UUID: a random
// 128-bit base drawn once per Source with the name's sequence number
// added into its low 64 bits. Names never repeat within a Source and
// collide across Sources only if two random bases do.
//
// Names are formatted idBlock at a time into one string and handed out as
// substrings of it, so a name costs neither a read of the kernel's
// random source nor an allocation of its own.
type Source struct {
	base   [16]byte
	prefix string // formatted high half of every name, with its dashes; made once

	mu    sync.Mutex
	seq   uint64
	block string // names not yet handed out start at used*uuidLen
	used  int
}

// New returns a Source with a fresh random base.
func New() *Source {
	ids := &Source{}
	if _, err := rand.Read(ids.base[:]); err != nil {
		// crypto/rand does not fail on supported platforms (Go 1.24+).
		panic("ashlock: reading random bytes: " + err.Error())
	}
	return ids
}

// Next returns a fresh claim name. Safe for concurrent use.
func (ids *Source) Next() string {
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

// appendName appends the name for sequence number seq. Only the low 64
// bits change with seq, so the first 19 characters (the high 64 bits and
// their dashes) are formatted once per Source and copied.
func (ids *Source) appendName(buf []byte, seq uint64) []byte {
	if ids.prefix == "" {
		u := ids.base
		u[6] = u[6]&0x0f | 0x40 // version 4
		p := hex.AppendEncode(nil, u[0:4])
		p = append(p, '-')
		p = hex.AppendEncode(p, u[4:6])
		p = append(p, '-')
		p = hex.AppendEncode(p, u[6:8])
		ids.prefix = string(append(p, '-'))
	}
	var low [8]byte
	binary.BigEndian.PutUint64(low[:], binary.BigEndian.Uint64(ids.base[8:])+seq)
	low[0] = low[0]&0x3f | 0x80 // RFC 4122 variant
	buf = append(buf, ids.prefix...)
	for i, x := range low {
		if i == 2 {
			buf = append(buf, '-')
		}
		buf = append(buf, hexDigits[x>>4], hexDigits[x&0x0f])
	}
	return buf
}

const hexDigits = "0123456789abcdef"
