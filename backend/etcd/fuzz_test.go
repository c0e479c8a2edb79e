package etcd

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// Fuzz targets for the parsing this package does on its own: key escaping
// (which keeps the queues of keys that are prefixes of one another apart),
// claim and stamp records read back from etcd, and cluster seeds. Seed
// inputs are in testdata/fuzz/<target>/; run one with, for example,
//
//	go test -run '^$' -fuzz '^FuzzEscapeKey$' -fuzztime 10m -parallel 1 ./backend/etcd

// FuzzEscapeKey checks, for any two byte strings a and b, that escaping
// never yields '/' and that two different keys never share a queue
// directory: escaped(a)+"/" is never a prefix of escaped(b)+"/".
func FuzzEscapeKey(f *testing.F) {
	for _, p := range [][2]string{
		{"a", "a/b"}, {"a/", "a"}, {"orders/4", "orders/42"}, {"a%", "a%2F"},
		{"%2F", "/"}, {"a\x00", "a"}, {"\x7f", "%7F"}, {"é/ü", "é"}, {"", "/"},
	} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := escapeKey(a), escapeKey(b)
		if strings.Contains(ea, "/") {
			t.Fatalf("escapeKey(%q) = %q contains '/'", a, ea)
		}
		if a != b && strings.HasPrefix(eb+"/", ea+"/") {
			t.Fatalf("keys %q and %q share a directory: %q is a prefix of %q", a, b, ea+"/", eb+"/")
		}
	})
}

// FuzzClaimRecord checks that decoding any bytes as a claim or stamp record
// never panics and either fails with ErrBadRecord or gives a record that
// survives encoding and decoding again; and that any record built from the
// fields round trips.
func FuzzClaimRecord(f *testing.F) {
	valid := encodeClaim(claimRecord{Owner: "host:42", AcquiredAt: time.Unix(0, 1_700_000_000_000_000_000), Stamp: backend.Timestamp{WallTime: 5, Logical: 7}})
	f.Add([]byte(valid), "host:42", int64(1_700_000_000_000_000_000), int64(5), uint32(7))
	f.Add([]byte{}, "", int64(0), int64(0), uint32(0))
	f.Add([]byte{1, 0, 0, 0, 0}, "é", int64(-1), int64(-1), uint32(1<<32-1))
	f.Add([]byte{1, 0x80, 0x00, 0, 0, 0}, "a\x00b", int64(1), int64(1<<62), uint32(0)) // overlong length
	f.Add([]byte{1, 0, 0, 0, 0}, "v1", int64(0), int64(0), uint32(0))                  // truncated
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "", int64(0), int64(0), uint32(0))
	full := encodeClaim(claimRecord{Owner: "o", Permit: backend.NoPermit, Value: []byte("v")})
	f.Add([]byte(full), "o", int64(0), int64(0), uint32(0))
	f.Add([]byte(encodeClaim(claimRecord{Permit: 2, Value: []byte{0}})), "", int64(1), int64(2), uint32(3))
	f.Add([]byte{1, 5, 0, 0, 0, 0, 0}, "", int64(0), int64(0), uint32(0))                // permit 4
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0x80, 0x80, 0x10}, "", int64(0), int64(0), uint32(0)) // value too long
	f.Add([]byte{2, 0, 0, 0, 0}, "v2", int64(0), int64(0), uint32(0))                    // unknown version
	f.Fuzz(func(t *testing.T, data []byte, owner string, at, wall int64, logical uint32) {
		// Read as a claim with n permits, n from the inputs.
		k := backend.Kind{Permits: int(1 + uint64(wall)%backend.MaxPermits)}
		if rec, err := decodeClaim(data, k); err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("decodeClaim(%x) error %v does not wrap ErrBadRecord", data, err)
			}
		} else {
			again, err := decodeClaim([]byte(encodeClaim(rec)), k)
			if err != nil || !sameRecord(again, rec) {
				t.Fatalf("decodeClaim(%x) = %+v, which re-encodes to %+v, %v", data, rec, again, err)
			}
		}

		var acquired time.Time
		if at != 0 {
			acquired = time.Unix(0, at)
		}
		rec := claimRecord{Owner: owner, AcquiredAt: acquired, Stamp: backend.Timestamp{WallTime: wall, Logical: logical}}
		got, err := decodeClaim([]byte(encodeClaim(rec)), k)
		if err != nil || !sameRecord(got, rec) {
			t.Fatalf("decodeClaim(encodeClaim(%+v)) = %+v, %v", rec, got, err)
		}
		// The same fields with a permit in k's range and a value, derived
		// from the inputs.
		rec.Permit = int(logical%uint32(k.Permits)) - int(logical/2%2) // sometimes backend.NoPermit
		rec.Value = []byte(owner)
		got, err = decodeClaim([]byte(encodeClaim(rec)), k)
		if err != nil || !sameRecord(got, rec) {
			t.Fatalf("decodeClaim(encodeClaim(%+v)) = %+v, %v", rec, got, err)
		}
	})
}

// sameRecord compares records field by field; no value reads as an empty
// one.
func sameRecord(a, b claimRecord) bool {
	return a.Owner == b.Owner && a.Stamp == b.Stamp && a.AcquiredAt.Equal(b.AcquiredAt) && a.AcquiredAt.IsZero() == b.AcquiredAt.IsZero() &&
		a.Permit == b.Permit && bytes.Equal(a.Value, b.Value)
}

// FuzzParseSeed checks that ParseSeed never panics, that every failure
// wraps ErrBadSeed, and that every success gives at least one endpoint
// with a numeric port in 1..65535 and a valid prefix - and is a fixed
// point: the seed rebuilt from the result parses to the same result.
func FuzzParseSeed(f *testing.F) {
	for _, s := range []string{
		"etcd://h1:2379,h2:2379/prefix/", "etcd://localhost", "etcd://127.0.0.1:2379/app",
		"etcd://[::1]:2379/a/b/", "etcd://[::1]/", "etcd://::1/", "etcd:///p/", "etcd://h:0/",
		"etcd://h:65536/", "etcd://a,,b/", "etcd://h/p?x=1", "etcd://h/p#f", "redis://h:1/",
		"etcd://h/\x00/", "etcd://[fe80::1%eth0]:2379/", "etcd://h:+1/", "etcd://h:0x10/",
		"etcd://h:02379/", "etcd://[h]:1/", "etcd://h/" + strings.Repeat("p", 300),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed string) {
		eps, prefix, err := ParseSeed(seed)
		if err != nil {
			if !errors.Is(err, ErrBadSeed) {
				t.Fatalf("ParseSeed(%q) error %v does not wrap ErrBadSeed", seed, err)
			}
			if eps != nil || prefix != "" {
				t.Fatalf("ParseSeed(%q) failed but returned %q, %q", seed, eps, prefix)
			}
			return
		}
		if len(eps) == 0 {
			t.Fatalf("ParseSeed(%q) gave no endpoints", seed)
		}
		for _, ep := range eps {
			host, port, err := net.SplitHostPort(ep)
			if err != nil || host == "" {
				t.Fatalf("ParseSeed(%q): endpoint %q is not host:port: %v", seed, ep, err)
			}
			if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || strconv.FormatUint(n, 10) != port {
				t.Fatalf("ParseSeed(%q): endpoint %q has port %q", seed, ep, port)
			}
		}
		if err := validatePrefix(prefix); err != nil {
			t.Fatalf("ParseSeed(%q) gave prefix %q: %v", seed, prefix, err)
		}
		rebuilt := seedScheme + strings.Join(eps, ",") + "/" + prefix
		eps2, prefix2, err := ParseSeed(rebuilt)
		if err != nil || prefix2 != prefix || strings.Join(eps2, ",") != strings.Join(eps, ",") {
			t.Fatalf("ParseSeed(%q) = %q, %q; rebuilt %q parses to %q, %q, %v", seed, eps, prefix, rebuilt, eps2, prefix2, err)
		}
	})
}
