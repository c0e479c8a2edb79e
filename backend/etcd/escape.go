package etcd

import "strings"

// escapeKey maps a lock key to the form used inside etcd keys. It replaces
// '/', '%', DEL and every byte below 0x20 with "%XX" (upper-case hex) and
// keeps every other byte, including non-ASCII UTF-8, unchanged.
//
// An escaped key never contains '/'. A key's claim directory is
// "<escaped>/", so the directory of one key is never a prefix of another
// key's directory, even when the keys themselves are prefixes of one
// another ("a" → "a/", "a/b" → "a%2Fb/", "a/" → "a%2F/"). The mapping is
// injective: '%' is escaped too, so an escape sequence cannot be confused
// with the bytes it stands for.
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
	const upperHex = "0123456789ABCDEF"
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

// mustEscape reports whether escapeKey replaces byte c.
func mustEscape(c byte) bool {
	return c == '/' || c == '%' || c < 0x20 || c == 0x7f
}
