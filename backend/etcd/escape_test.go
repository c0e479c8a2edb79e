package etcd

import (
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestEscapeKeyTable(t *testing.T) {
	tests := []struct {
		name, key, want string
	}{
		{"plain", "orders-42", "orders-42"},
		{"slash", "a/b", "a%2Fb"},
		{"trailing slash", "a/", "a%2F"},
		{"percent", "50%", "50%25"},
		{"already escaped looking", "a%2Fb", "a%252Fb"},
		{"control bytes", "a\x00b\x1f\x7f", "a%00b%1F%7F"},
		{"utf8 kept", "ключ/é", "ключ%2Fé"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := escapeKey(tt.key); got != tt.want {
				t.Fatalf("escapeKey(%q) = %q, want %q", tt.key, got, tt.want)
			}
			back, err := unescapeKey(tt.want)
			if err != nil || back != tt.key {
				t.Fatalf("unescapeKey(%q) = %q, %v; want %q", tt.want, back, err, tt.key)
			}
		})
	}
}

func TestUnescapeKeyRejectsNonCanonical(t *testing.T) {
	tests := []struct{ name, in string }{
		{"raw slash", "a/b"},
		{"raw control", "a\x01"},
		{"truncated escape", "a%2"},
		{"lone percent", "%"},
		{"lower-case hex", "a%2fb"},
		{"not hex", "a%G0"},
		{"needless escape", "%41"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := unescapeKey(tt.in); !errors.Is(err, errBadEscape) {
				t.Fatalf("unescapeKey(%q) = %q, %v; want errBadEscape", tt.in, got, err)
			}
		})
	}
}

// Escaping round-trips, never yields '/', and is canonical: whatever
// unescapeKey accepts, escapeKey gives back unchanged.
func TestEscapeKeyProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.StringOf(rapid.SampledFrom([]rune("ab/%\x00\x7fé\x1f2F"))).Draw(t, "key")
		esc := escapeKey(k)
		if strings.Contains(esc, "/") {
			t.Fatalf("escapeKey(%q) = %q contains '/'", k, esc)
		}
		back, err := unescapeKey(esc)
		if err != nil || back != k {
			t.Fatalf("unescapeKey(escapeKey(%q)) = %q, %v", k, back, err)
		}
		s := rapid.String().Draw(t, "arbitrary")
		if u, err := unescapeKey(s); err == nil && escapeKey(u) != s {
			t.Fatalf("unescapeKey(%q) = %q but escapeKey gives %q", s, u, escapeKey(u))
		}
	})
}

// No two distinct keys get queue directories where one is a prefix of the
// other: that is what keeps "a" and "a/b" in separate queues.
func TestDirectoriesNeverNest(t *testing.T) {
	l := newLayout("p/")
	keys := []string{"a", "a/", "a/b", "a%", "a%2F", "orders/4", "orders/42", "ab", "a b", "a\x00"}
	for _, k1 := range keys {
		for _, k2 := range keys {
			if k1 == k2 {
				continue
			}
			if d1, d2 := l.dir(k1), l.dir(k2); strings.HasPrefix(d2, d1) {
				t.Errorf("dir(%q) = %q is a prefix of dir(%q) = %q", k1, d1, k2, d2)
			}
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		gen := rapid.StringOf(rapid.SampledFrom([]rune("a/%2F")))
		k1, k2 := gen.Draw(t, "k1"), gen.Draw(t, "k2")
		if k1 != k2 && strings.HasPrefix(l.dir(k2), l.dir(k1)) {
			t.Fatalf("dir(%q) is a prefix of dir(%q)", k1, k2)
		}
	})
}

func TestLayoutParseClaim(t *testing.T) {
	l := newLayout("app/")
	for _, k := range []string{"a", "a/b", "x%y", "é/"} {
		t.Run(k, func(t *testing.T) {
			key, id, err := l.parseClaim(l.claim(k, "id-1"))
			if err != nil || key != k || id != "id-1" {
				t.Fatalf("parseClaim(claim(%q)) = %q, %q, %v", k, key, id, err)
			}
		})
	}
	bad := []struct{ name, in string }{
		{"other prefix", "other/claims/a/id"},
		{"stamp record", l.stamp("a")},
		{"no id", "app/claims/a"},
		{"bad escape", "app/claims/a%zz/id"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := l.parseClaim(tt.in); err == nil {
				t.Fatalf("parseClaim(%q) succeeded", tt.in)
			}
		})
	}
	if strings.HasPrefix(l.stamp("a"), l.claimsRoot()) {
		t.Fatalf("stamp record %q is inside the claims namespace %q", l.stamp("a"), l.claimsRoot())
	}
}
