package etcd

import (
	"errors"
	"fmt"

	"github.com/ash-lock/ashlock/backend"
)

// DefaultPrefix is the prefix a Backend uses unless WithPrefix sets one.
const DefaultPrefix = "ashlock/"

// maxPrefixLen bounds a prefix so that claim keys stay far below etcd's
// request size limit.
const maxPrefixLen = 256

// ErrBadPrefix reports a prefix that WithPrefix or ParseSeed rejects.
var ErrBadPrefix = errors.New("etcd: invalid key prefix")

// Option configures a Backend in New.
type Option func(*layout)

// WithPrefix sets the etcd key prefix under which the Backend keeps every
// key it reads or writes (default DefaultPrefix, "ashlock/"). Give each
// application its own prefix; an etcd role with read-write permission on
// the prefix range is all the Backend needs.
//
// The prefix must be 1 to 256 bytes of valid UTF-8 without control
// characters and end in '/'; otherwise New fails with an error wrapping
// ErrBadPrefix.
func WithPrefix(p string) Option {
	return func(l *layout) { l.prefix = p }
}

// validatePrefix checks p against the rules documented on WithPrefix: a
// prefix is a valid lock key (backend.CheckKey: UTF-8, no control
// characters), no longer than maxPrefixLen, ending in '/'. The trailing
// '/' keeps two applications' prefixes such as "app" and "app2" from
// sharing keys.
func validatePrefix(p string) error {
	if err := backend.CheckKey(p); err != nil {
		// Not wrapped with %w: a bad prefix is ErrBadPrefix, not a bad
		// lock key.
		return fmt.Errorf("%w: %v", ErrBadPrefix, err)
	}
	switch {
	case len(p) > maxPrefixLen:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrBadPrefix, len(p), maxPrefixLen)
	case p[len(p)-1] != '/':
		return fmt.Errorf("%w: %q does not end in '/'", ErrBadPrefix, p)
	}
	return nil
}
