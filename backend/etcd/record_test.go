package etcd

import (
	"errors"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ash-lock/ashlock/backend"
)

func TestClaimRecordRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		rec  claimRecord
	}{
		{"zero", claimRecord{}},
		{"full", claimRecord{
			Owner:      "host-1:4242",
			AcquiredAt: time.Unix(1700000000, 123456789),
			Stamp:      backend.Timestamp{WallTime: 1700000000123456789, Logical: 7},
		}},
		{"negative wall", claimRecord{Owner: "x", Stamp: backend.Timestamp{WallTime: -5, Logical: math.MaxUint32}}},
		{"binary owner", claimRecord{Owner: "\x00\xff"}},
		{"shared", claimRecord{Owner: "r", Shared: true, Permits: 1}},
		{"counted waiting", claimRecord{Owner: "c", Permits: 5, Permit: backend.NoPermit}},
		{"counted holding", claimRecord{Owner: "c", Permits: 5, Permit: 4, Value: []byte("v")}},
		{"exclusive with value", claimRecord{Owner: "e", Value: []byte{0, 1, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeClaim([]byte(encodeClaim(tt.rec)))
			if err != nil {
				t.Fatal(err)
			}
			if !sameRecord(got, tt.rec) {
				t.Fatalf("round trip: got %+v, want %+v", got, tt.rec)
			}
		})
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	valid := encodeClaim(claimRecord{Owner: "abc", AcquiredAt: time.Unix(1, 0)})
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"unknown version", "\x09" + valid[1:]},
		{"truncated owner", valid[:3]},
		{"truncated stamp", valid[:len(valid)-1]},
		{"trailing bytes", valid + "x"},
		{"owner length too big", "\x01\xff\xff\xff\xff\x0f"},
		{"overlong varint", "\x01\x00" + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"},
		{"text", "hello"},
		{"unknown flag", "\x01\x02\x00\x00\x00\x00\x00\x00\x00"},
		{"shared with permits", "\x01\x01\x03\x00\x00\x00\x00\x00\x00"},
		{"permit out of range", "\x01\x00\x03\x04\x00\x00\x00\x00\x00"},
		{"too many permits", "\x01\x00\x81\x08\x00\x00\x00\x00\x00\x00"},
		{"value too long", "\x01\x00\x00\x00\x00\x00\x00\x00\x81\x80\x04"},
		{"truncated value", "\x01\x00\x00\x00\x00\x00\x00\x00\x02a"},
		{"version 2", "\x02" + valid[1:]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeClaim([]byte(tt.in)); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("decodeClaim(%q) error = %v, want ErrBadRecord", tt.in, err)
			}
		})
	}
	logicalTooBig := "\x01\x00" + "\x00" + "\x80\x80\x80\x80\x10" // logical = 2^32
	if _, err := decodeStamp([]byte(logicalTooBig)); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("decodeStamp with logical 2^32: error = %v, want ErrBadRecord", err)
	}
}

func TestStampRecordRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		st := backend.Timestamp{WallTime: rapid.Int64().Draw(t, "wall"), Logical: rapid.Uint32().Draw(t, "logical")}
		got, err := decodeStamp([]byte(encodeStamp(st)))
		if err != nil || got != st {
			t.Fatalf("decodeStamp(encodeStamp(%v)) = %v, %v", st, got, err)
		}
	})
}

// Decoding arbitrary bytes never panics and either fails with ErrBadRecord
// or yields a record that encodes and decodes to itself.
func TestDecodeArbitraryBytes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOf(rapid.Byte()).Draw(t, "bytes")
		if rec, err := decodeClaim(b); err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("decodeClaim error %v does not wrap ErrBadRecord", err)
			}
		} else if again, err := decodeClaim([]byte(encodeClaim(rec))); err != nil || !sameRecord(again, rec) {
			t.Fatalf("re-encoding %+v gave %+v, %v", rec, again, err)
		}
		if _, err := decodeStamp(b); err != nil && !errors.Is(err, ErrBadRecord) {
			t.Fatalf("decodeStamp error %v does not wrap ErrBadRecord", err)
		}
	})
}
