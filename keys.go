package ashlock

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ash-lock/ashlock/backend"
)

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
		if err := backend.CheckKey(k); err != nil {
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
