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
// has trailing bytes, carries an unknown version or flag, or has fields
// that contradict each other. Inspect and Acquire
// (when reading the previous stamp) return it wrapped.
var ErrBadRecord = errors.New("etcd: malformed record")

// Record versions. A decoder rejects versions it does not know rather than
// guessing, so a future format change is detected, not misread.
const recordVersion = 1

// claimRecord is the value stored at a claim key.
type claimRecord struct {
	Owner      string
	AcquiredAt time.Time // zero when unknown
	Stamp      backend.Timestamp
	Shared     bool
	Permits    int    // the key's permit count as the claim asked for it; 0 means 1
	Permit     int    // the permit held, 0..Permits-1, or backend.NoPermit while a counted claim waits
	Value      []byte // published with the claim; nil when none
}

// encodeClaim serialises r:
//
//	version byte (1) | flags (bit 0: shared) | uvarint permits | uvarint permit+1 (0: none yet) |
//	uvarint len(owner) | owner | varint acquired-at (Unix ns, 0 = zero time) |
//	varint stamp wall time | uvarint stamp logical | uvarint len(value) | value
//
// It is written on every Acquire, so it is built in a strings.Builder: one
// allocation, not a buffer and then its copy as a string.
func encodeClaim(r claimRecord) string {
	var sb strings.Builder
	var v [2 * binary.MaxVarintLen64]byte // the varints, one field at a time
	sb.Grow(2 + binary.MaxVarintLen64*7 + len(r.Owner) + len(r.Value))
	uv := func(x int) { sb.Write(binary.AppendUvarint(v[:0], uint64(max(x, 0)))) }
	var flags byte
	if r.Shared {
		flags |= flagShared
	}
	sb.Write([]byte{recordVersion, flags})
	uv(r.Permits)
	uv(r.Permit + 1)
	uv(len(r.Owner))
	sb.WriteString(r.Owner)
	at := int64(0)
	if !r.AcquiredAt.IsZero() {
		at = r.AcquiredAt.UnixNano()
	}
	sb.Write(binary.AppendVarint(v[:0], at))
	sb.Write(appendStamp(v[:0], r.Stamp))
	uv(len(r.Value))
	sb.Write(r.Value)
	return sb.String()
}

const flagShared = 1 << 0

// decodeClaim parses a value written by encodeClaim. It never panics: any
// input it cannot read exactly, or whose fields contradict each other
// (a shared claim with several permits, a permit out of range, a value
// above backend.MaxValueLen), yields an error wrapping ErrBadRecord.
func decodeClaim(v []byte) (claimRecord, error) {
	d := decoder{buf: v}
	var r claimRecord
	if ver := d.byte(); d.err == nil && ver != recordVersion {
		return claimRecord{}, fmt.Errorf("%w: claim record version %d", ErrBadRecord, ver)
	}
	flags := d.byte()
	if flags&^flagShared != 0 {
		d.fail("unknown flags %#x", flags)
	}
	r.Shared = flags&flagShared != 0
	n, p := d.uvarint(), d.uvarint()
	switch {
	case n > backend.MaxPermits:
		d.fail("%d permits", n)
	case r.Shared && n > 1:
		d.fail("a shared claim with %d permits", n)
	case p > max(n, 1):
		d.fail("permit %d of %d", p-1, n)
	}
	r.Permits, r.Permit = int(n), int(p)-1
	owner := d.bytes(d.uvarint())
	at := d.varint()
	r.Stamp = d.stamp()
	n = d.uvarint()
	if n > backend.MaxValueLen {
		d.fail("value of %d bytes", n)
	}
	if val := d.bytes(n); len(val) > 0 {
		r.Value = append([]byte(nil), val...)
	}
	if err := d.finish(); err != nil {
		return claimRecord{}, fmt.Errorf("%w: claim record: %v", ErrBadRecord, err)
	}
	if r.Owner = string(owner); at != 0 {
		r.AcquiredAt = time.Unix(0, at)
	}
	return r, nil
}

// encodeStamp serialises a stamp record: version byte (1) | stamp.
func encodeStamp(t backend.Timestamp) string {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64)
	b = append(b, recordVersion)
	return string(appendStamp(b, t))
}

// decodeStamp parses a value written by encodeStamp; errors wrap
// ErrBadRecord.
func decodeStamp(v []byte) (backend.Timestamp, error) {
	d := decoder{buf: v}
	if ver := d.byte(); d.err == nil && ver != recordVersion {
		return backend.Timestamp{}, fmt.Errorf("%w: stamp record version %d", ErrBadRecord, ver)
	}
	st := d.stamp()
	if err := d.finish(); err != nil {
		return backend.Timestamp{}, fmt.Errorf("%w: stamp record: %v", ErrBadRecord, err)
	}
	return st, nil
}

func appendStamp(b []byte, t backend.Timestamp) []byte {
	b = binary.AppendVarint(b, t.WallTime)
	return binary.AppendUvarint(b, uint64(t.Logical))
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

func (d *decoder) byte() byte {
	if b := d.next(1, false, "empty"); b != nil {
		return b[0]
	}
	return 0
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

func (d *decoder) stamp() backend.Timestamp {
	wall := d.varint()
	logical := d.uvarint()
	if logical > math.MaxUint32 {
		d.fail("logical counter %d overflows uint32", logical)
	}
	return backend.Timestamp{WallTime: wall, Logical: uint32(logical)}
}

// finish reports the first error, or trailing bytes.
func (d *decoder) finish() error {
	if d.err == nil && len(d.buf) > 0 {
		d.fail("%d trailing bytes", len(d.buf))
	}
	return d.err
}
