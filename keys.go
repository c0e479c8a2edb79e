package ashlock

import (
	"errors"
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/ash-lock/ashlock/backend"
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

// keySet validates LockAll's keys and returns them sorted, or every problem
// found (ErrInvalidKey for none, a duplicate or an invalid key;
// ErrInvalidConfig for more than backend.MaxKeys).
func keySet(keys []string) ([]string, error) {
	var errs []error
	switch {
	case len(keys) == 0:
		return nil, fmt.Errorf("%w: LockAll without keys", ErrInvalidKey)
	case len(keys) > backend.MaxKeys:
		errs = append(errs, fmt.Errorf("%w: LockAll of %d keys, more than %d", ErrInvalidConfig, len(keys), backend.MaxKeys))
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i, k := range sorted {
		if err := validateKey(k); err != nil {
			errs = append(errs, err)
		}
		if i > 0 && sorted[i-1] == k {
			errs = append(errs, fmt.Errorf("%w: %q given twice", ErrInvalidKey, k))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return sorted, nil
}
