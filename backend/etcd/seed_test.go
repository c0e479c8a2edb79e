package etcd

import (
	"errors"
	"slices"
	"testing"
)

func TestParseSeed(t *testing.T) {
	tests := []struct {
		name      string
		seed      string
		endpoints []string
		prefix    string
	}{
		{"two hosts and prefix", "etcd://h1:2379,h2:2379/name/", []string{"h1:2379", "h2:2379"}, "name/"},
		{"no path", "etcd://h1:2379", []string{"h1:2379"}, "ashlock/"},
		{"root path", "etcd://h1:2379/", []string{"h1:2379"}, "ashlock/"},
		{"path without slash", "etcd://h1:2379/app", []string{"h1:2379"}, "app/"},
		{"nested path", "etcd://h1:2379/team/app/", []string{"h1:2379"}, "team/app/"},
		{"default port", "etcd://h1,h2:1234", []string{"h1:2379", "h2:1234"}, "ashlock/"},
		{"ipv6", "etcd://[::1]:2379,[fe80::1]/x/", []string{"[::1]:2379", "[fe80::1]:2379"}, "x/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps, prefix, err := ParseSeed(tt.seed)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(eps, tt.endpoints) || prefix != tt.prefix {
				t.Fatalf("ParseSeed(%q) = %q, %q; want %q, %q", tt.seed, eps, prefix, tt.endpoints, tt.prefix)
			}
		})
	}
}

func TestParseSeedRejects(t *testing.T) {
	tests := []struct {
		name, seed string
		alsoPrefix bool
	}{
		{"empty", "", false},
		{"memory scheme", "memory://", false},
		{"http scheme", "http://h1:2379/", false},
		{"no host", "etcd:///x/", false},
		{"empty host in list", "etcd://h1:2379,,h2:2379/", false},
		{"missing port number", "etcd://h1:/", false},
		{"bad port", "etcd://h1:http/", false},
		{"port out of range", "etcd://h1:70000/", false},
		{"bare ipv6", "etcd://::1/", false},
		{"query", "etcd://h1:2379/x/?a=b", false},
		{"control char in prefix", "etcd://h1:2379/a\x01b/", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps, prefix, err := ParseSeed(tt.seed)
			if !errors.Is(err, ErrBadSeed) {
				t.Fatalf("ParseSeed(%q) = %q, %q, %v; want ErrBadSeed", tt.seed, eps, prefix, err)
			}
			if tt.alsoPrefix && !errors.Is(err, ErrBadPrefix) {
				t.Fatalf("ParseSeed(%q) error %v does not wrap ErrBadPrefix", tt.seed, err)
			}
		})
	}
}

func TestValidatePrefix(t *testing.T) {
	tests := []struct {
		name, prefix string
		ok           bool
	}{
		{"default", DefaultPrefix, true},
		{"nested", "team/app/", true},
		{"leading slash", "/ashlock/", true},
		{"empty", "", false},
		{"no trailing slash", "ashlock", false},
		{"invalid utf8", "a\xff/", false},
		{"control", "a\tb/", false},
		{"too long", string(make([]byte, 300)) + "/", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validatePrefix(tt.prefix)
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, ErrBadPrefix)) {
				t.Fatalf("validatePrefix(%q) = %v, want ok=%v", tt.prefix, err, tt.ok)
			}
		})
	}
}
