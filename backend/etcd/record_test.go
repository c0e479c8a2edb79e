package etcd

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"pgregory.net/rapid"

	"github.com/ash-lock/ashlock/backend"
)

func TestClaimRecordRoundTrip(t *testing.T) {
	counted := backend.Kind{Permits: 5}
	tests := []struct {
		name string
		kind backend.Kind
		rec  claimRecord
	}{
		{"zero", exclusive, claimRecord{}},
		{"full", exclusive, claimRecord{
			Owner:      "host-1:4242",
			AcquiredAt: time.Unix(1700000000, 123456789),
			Stamp:      backend.Timestamp{WallTime: 1700000000123456789, Logical: 7},
		}},
		{"negative wall", exclusive, claimRecord{Owner: "x", Stamp: backend.Timestamp{WallTime: -5, Logical: math.MaxUint32}}},
		{"binary owner", exclusive, claimRecord{Owner: "\x00\xff"}},
		{"shared", backend.Kind{Shared: true, Permits: 1}, claimRecord{Owner: "r"}},
		{"counted waiting", counted, claimRecord{Owner: "c", Permit: backend.NoPermit}},
		{"counted holding", counted, claimRecord{Owner: "c", Permit: 4, Value: []byte("v")}},
		{"exclusive with value", exclusive, claimRecord{Owner: "e", Value: []byte{0, 1, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeClaim([]byte(encodeClaim(tt.rec)), tt.kind)
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
		{"truncated owner", valid[:4]},
		{"truncated stamp", valid[:len(valid)-1]},
		{"trailing bytes", valid + "x"},
		{"owner length too big", "\x01\x00\xff\xff\xff\xff\x0f"},
		{"overlong varint", "\x01\x00" + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"},
		{"text", "hello"},
		{"permit out of range", "\x01\x04\x00\x00\x00\x00\x00"},
		{"logical too big", "\x01\x00\x00\x00\x00\x80\x80\x80\x80\x10\x00"}, // 2^32
		{"value too long", "\x01\x00\x00\x00\x00\x00\x81\x80\x04"},
		{"truncated value", "\x01\x00\x00\x00\x00\x00\x02a"},
		{"version 2", "\x02" + valid[1:]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Permit 2 is out of range for 2 permits; 1 is in range.
			if _, err := decodeClaim([]byte(tt.in), backend.Kind{Permits: 2}); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("decodeClaim(%q) error = %v, want ErrBadRecord", tt.in, err)
			}
		})
	}
	_, err := decodeClaim([]byte("\x01\x02\x00\x00\x00\x00\x00"), backend.Kind{Permits: 2})
	assert.NoError(t, err, "permit 1 of 2")
	_, err = decodeClaim([]byte("\x01\x02\x00\x00\x00\x00\x00"), exclusive)
	assert.ErrorIs(t, err, ErrBadRecord, "permit 1 of a plain claim")
}

func TestStampRecordRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		st := backend.Timestamp{WallTime: rapid.Int64().Draw(t, "wall"), Logical: rapid.Uint32().Draw(t, "logical")}
		got, err := decodeClaim([]byte(encodeClaim(claimRecord{Stamp: st})), exclusive)
		if err != nil || got.Stamp != st {
			t.Fatalf("stamp record of %v decodes to %v, %v", st, got.Stamp, err)
		}
	})
}

// Decoding arbitrary bytes never panics and either fails with ErrBadRecord
// or yields a record that encodes and decodes to itself.
func TestDecodeArbitraryBytes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOf(rapid.Byte()).Draw(t, "bytes")
		k := backend.Kind{Permits: rapid.IntRange(1, backend.MaxPermits).Draw(t, "permits")}
		if rec, err := decodeClaim(b, k); err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("decodeClaim error %v does not wrap ErrBadRecord", err)
			}
		} else if again, err := decodeClaim([]byte(encodeClaim(rec)), k); err != nil || !sameRecord(again, rec) {
			t.Fatalf("re-encoding %+v gave %+v, %v", rec, again, err)
		}
	})
}
