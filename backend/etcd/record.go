package etcd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// ErrBadRecord reports a value under the Backend's prefix that this package
// did not write or cannot read: a claim or stamp record that is truncated,
// has trailing bytes, carries an unknown version, or has fields that
// contradict each other or the kind the claim's name gives (a permit out of
// range). Inspect and Acquire (when reading the previous stamp) return it
// wrapped.
var ErrBadRecord = errors.New("etcd: malformed record")

// Record versions. A decoder rejects versions it does not know rather than
// guessing, so a future format change is detected, not misread.
const recordVersion = 1

// claimRecord is the value stored at a claim key. The claim's kind is not
// in it: the claim's name carries it (kind.go), and a decoder is told it.
// A stamp record is a claimRecord with the stamp alone set.
type claimRecord struct {
	Owner      string
	AcquiredAt time.Time // zero when unknown
	Stamp      backend.Timestamp
	Permit     int    // the permit held, 0..n-1, or backend.NoPermit while a counted claim waits
	Value      []byte // published with the claim; nil when none
}

// encodeClaim serialises r:
//
//	version byte (1) | uvarint permit+1 (0: none yet) | uvarint len(owner) | owner |
//	varint acquired-at (Unix ns, 0 = zero time) | varint stamp wall time |
//	uvarint stamp logical | uvarint len(value) | value
//
// It is written on every Acquire, so it is built in a strings.Builder: one
// allocation, not a buffer and then its copy as a string.
func encodeClaim(r claimRecord) string {
	var sb strings.Builder
	var v [binary.MaxVarintLen64]byte // the varints, one field at a time
	sb.Grow(1 + binary.MaxVarintLen64*6 + len(r.Owner) + len(r.Value))
	uv := func(x int) { sb.Write(binary.AppendUvarint(v[:0], uint64(max(x, 0)))) }
	sb.WriteByte(recordVersion)
	uv(r.Permit + 1)
	uv(len(r.Owner))
	sb.WriteString(r.Owner)
	at := int64(0)
	if !r.AcquiredAt.IsZero() {
		at = r.AcquiredAt.UnixNano()
	}
	sb.Write(binary.AppendVarint(v[:0], at))
	sb.Write(binary.AppendVarint(v[:0], r.Stamp.WallTime))
	uv(int(r.Stamp.Logical))
	uv(len(r.Value))
	sb.Write(r.Value)
	return sb.String()
}

// decodeClaim parses a value written by encodeClaim for a claim of kind k
// (a stamp record reads as exclusive). It never panics: any input it cannot
// read exactly, or whose fields contradict k or each other (a permit out of
// k's range, a value above backend.MaxValueLen), yields an error wrapping
// ErrBadRecord.
func decodeClaim(v []byte, k backend.Kind) (claimRecord, error) {
	d := decoder{buf: v}
	var r claimRecord
	if ver := d.next(1, false, "empty"); ver != nil && ver[0] != recordVersion {
		d.fail("version %d", ver[0])
	}
	p := d.uvarint()
	if r.Permit = int(p) - 1; p > uint64(k.Permits) {
		d.fail("permit %d of %d", p-1, k.Permits)
	}
	owner := d.bytes(d.uvarint())
	at := d.varint()
	wall, logical := d.varint(), d.uvarint()
	if logical > math.MaxUint32 {
		d.fail("logical counter %d overflows uint32", logical)
	}
	r.Stamp = backend.Timestamp{WallTime: wall, Logical: uint32(logical)}
	n := d.uvarint()
	if n > backend.MaxValueLen {
		d.fail("value of %d bytes", n)
	}
	if val := d.bytes(n); len(val) > 0 {
		r.Value = append([]byte(nil), val...)
	}
	if err := d.finish(); err != nil {
		return claimRecord{}, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if r.Owner = string(owner); at != 0 {
		r.AcquiredAt = time.Unix(0, at)
	}
	return r, nil
}

// decoder reads fields in order and remembers the first error, so a
// decode function reads every field and checks once at the end.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

// next consumes the next n bytes, or fails with what if bad is set or
// fewer than n are left.
func (d *decoder) next(n int, bad bool, what string) []byte {
	if bad || n > len(d.buf) {
		d.fail("%s", what)
	}
	if d.err != nil {
		return nil
	}
	b := d.buf[:n]
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.buf)
	d.next(n, n <= 0, "bad uvarint")
	return v
}
func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.buf)
	d.next(n, n <= 0, "bad varint")
	return v
}

func (d *decoder) bytes(n uint64) []byte {
	if n > uint64(len(d.buf)) {
		d.fail("length %d exceeds the %d bytes left", n, len(d.buf))
	}
	return d.next(int(min(n, uint64(len(d.buf)))), false, "")
}

// finish reports the first error, or trailing bytes.
func (d *decoder) finish() error {
	if d.err == nil && len(d.buf) > 0 {
		d.fail("%d trailing bytes", len(d.buf))
	}
	return d.err
}
