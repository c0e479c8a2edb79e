package etcd

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
	i := 0
	for i < len(k) && !mustEscape(k[i]) {
		i++
	}
	if i == len(k) {
		return k
	}
	const upperHex = "0123456789ABCDEF"
	b := []byte(k[:i])
	for ; i < len(k); i++ {
		if c := k[i]; mustEscape(c) {
			b = append(b, '%', upperHex[c>>4], upperHex[c&0x0f])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

// mustEscape reports whether escapeKey replaces byte c.
func mustEscape(c byte) bool {
	return c == '/' || c == '%' || c < 0x20 || c == 0x7f
}
