package ashlock

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// maxKeyLen bounds keys so that a claim's name stays well within what any
// store accepts (etcd's default request limit is 1.5 MiB, but keys are
// repeated in every watch event and range response).
const maxKeyLen = 1024

// validateKey reports why key cannot name a lock, or nil. The error wraps
// ErrInvalidKey.
func validateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > maxKeyLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidKey, len(key), maxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	for i, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: control character %U at byte %d", ErrInvalidKey, r, i)
		}
	}
	return nil
}
