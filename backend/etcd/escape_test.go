package etcd

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
			assert.Equal(t, tt.want, escapeKey(tt.key))
		})
	}
}

// Escaping never yields '/' and never maps two keys to one form.
func TestEscapeKeyProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		gen := rapid.StringOf(rapid.SampledFrom([]rune("ab/%\x00\x7fé\x1f2F")))
		k1, k2 := gen.Draw(t, "k1"), gen.Draw(t, "k2")
		e1, e2 := escapeKey(k1), escapeKey(k2)
		if strings.Contains(e1, "/") {
			t.Fatalf("escapeKey(%q) = %q contains '/'", k1, e1)
		}
		if k1 != k2 && e1 == e2 {
			t.Fatalf("keys %q and %q both escape to %q", k1, k2, e1)
		}
	})
}

// No two distinct keys get queue directories where one is a prefix of the
// other: that is what keeps "a" and "a/b" in separate queues.
func TestDirectoriesNeverNest(t *testing.T) {
	l := layout{prefix: "p/"}
	keys := []string{"a", "a/", "a/b", "a%", "a%2F", "orders/4", "orders/42", "ab", "a b", "a\x00"}
	for _, k1 := range keys {
		for _, k2 := range keys {
			if k1 != k2 {
				assert.False(t, strings.HasPrefix(l.dir(k2), l.dir(k1)), "dir(%q) = %q is a prefix of dir(%q) = %q", k1, l.dir(k1), k2, l.dir(k2))
			}
		}
	}
	require.False(t, strings.HasPrefix(l.stamp("a"), l.dir("a")), "a stamp record inside a queue directory")
}

// Claim names embed their lease, so two leases never share one, and slots
// tell apart the claims of one lease.
func TestClaimNames(t *testing.T) {
	assert.Equal(t, "1f", claimName(0x1f, 0))
	assert.Equal(t, "1f-2", claimName(0x1f, 2))
	assert.NotEqual(t, claimName(0x1f, 1), claimName(0x1f, 0))
}
