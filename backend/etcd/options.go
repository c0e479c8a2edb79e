package etcd

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
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

// validatePrefix checks p against the rules documented on WithPrefix. The
// trailing '/' keeps two applications' prefixes such as "app" and "app2"
// from sharing keys.
func validatePrefix(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty", ErrBadPrefix)
	case len(p) > maxPrefixLen:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrBadPrefix, len(p), maxPrefixLen)
	case !utf8.ValidString(p):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrBadPrefix, p)
	case p[len(p)-1] != '/':
		return fmt.Errorf("%w: %q does not end in '/'", ErrBadPrefix, p)
	}
	for _, r := range p {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %q contains a control character", ErrBadPrefix, p)
		}
	}
	return nil
}
