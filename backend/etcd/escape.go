package etcd

import (
	"errors"
	"fmt"
	"strings"
)

// errBadEscape reports a string that escapeKey could not have produced.
var errBadEscape = errors.New("malformed escaped key")

// escapeKey maps a lock key to the form used inside etcd keys. It replaces
// '/', '%', DEL and every byte below 0x20 with "%XX" (upper-case hex) and
// keeps every other byte, including non-ASCII UTF-8, unchanged.
//
// The point is that an escaped key never contains '/'. A key's claim
// directory is "<escaped>/", so the directory of one key can never be a
// prefix of another key's directory, even when the keys themselves are
// prefixes of one another ("a" → "a/", "a/b" → "a%2Fb/", "a/" → "a%2F/").
// escapeKey is injective, and unescapeKey undoes it.
func escapeKey(k string) string {
	n := 0
	for i := 0; i < len(k); i++ {
		if mustEscape(k[i]) {
			n++
		}
	}
	if n == 0 {
		return k
	}
	var b strings.Builder
	b.Grow(len(k) + 2*n)
	for i := 0; i < len(k); i++ {
		c := k[i]
		if mustEscape(c) {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&0x0f])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// unescapeKey inverts escapeKey. It accepts exactly the strings escapeKey
// produces: a raw byte that should have been escaped, a '%' not followed by
// two upper-case hex digits, or an escape of a byte that needs none is an
// error. So for every s, unescapeKey(s) succeeds with k if and only if
// escapeKey(k) == s.
func unescapeKey(s string) (string, error) {
	if !strings.ContainsAny(s, "%/") && !hasControl(s) {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if mustEscape(c) {
				return "", fmt.Errorf("%w: raw byte %#02x at %d", errBadEscape, c, i)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%w: truncated escape at %d", errBadEscape, i)
		}
		hi, ok1 := fromUpperHex(s[i+1])
		lo, ok2 := fromUpperHex(s[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w: bad escape %q at %d", errBadEscape, s[i:i+3], i)
		}
		d := hi<<4 | lo
		if !mustEscape(d) {
			return "", fmt.Errorf("%w: needless escape %q at %d", errBadEscape, s[i:i+3], i)
		}
		b.WriteByte(d)
		i += 2
	}
	return b.String(), nil
}

const upperHex = "0123456789ABCDEF"

// mustEscape reports whether escapeKey replaces byte c.
func mustEscape(c byte) bool {
	return c == '/' || c == '%' || c < 0x20 || c == 0x7f
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

func fromUpperHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
