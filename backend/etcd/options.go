package etcd

import (
	"errors"
	"fmt"
	"time"
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
type Option func(*config)

type config struct {
	prefix     string
	watchDelay time.Duration
}

// WithPrefix sets the etcd key prefix under which the Backend keeps every
// key it reads or writes (default DefaultPrefix, "ashlock/"). Give each
// application its own prefix; an etcd role with read-write permission on
// the prefix range is all the Backend needs.
//
// The prefix must be 1 to 256 bytes of valid UTF-8 without control
// characters and end in '/'; otherwise New fails with an error wrapping
// ErrBadPrefix.
func WithPrefix(p string) Option {
	return func(c *config) { c.prefix = p }
}

// ErrBadWatchDelay reports a delay that WithClaimWatchDelay rejects.
var ErrBadWatchDelay = errors.New("etcd: invalid claim watch delay")

// WithClaimWatchDelay sets how long a claim may go without a watch of its
// own (default DefaultClaimWatchDelay, 5ms). The watch is what makes a
// claim's loss - a revoked lease, an operator's delete - poison its guard
// at once. With a delay d, a claim is mature once it has existed for
// between d and 2d. The first waiting claim of a key is watched from
// before it is created, as is any claim that inherits a watch kept from an
// earlier mature claim of the same key; other claims get their watch when
// they mature. A claim released before maturing gives its watch up. So a
// key taken again and again for short holds costs etcd and the client no
// watch traffic at all, and a key held long costs what it did without a
// delay. The price: a claim without a watch learns of a loss in its first
// moments only when it matures, up to 2d and a round trip after the claim
// was made. Zero watches every claim from before it is created, or, for a
// TryAcquire, from the moment it is, as earlier versions did.
//
// d must be between 0 and 40ms, which keeps detection well within the
// 100ms that guarantee 4 aims for; otherwise New fails with an error
// wrapping ErrBadWatchDelay.
func WithClaimWatchDelay(d time.Duration) Option {
	return func(c *config) { c.watchDelay = d }
}

func validateWatchDelay(d time.Duration) error {
	if d < 0 || d > maxClaimWatchDelay {
		return fmt.Errorf("%w: %v, want 0 to %v", ErrBadWatchDelay, d, maxClaimWatchDelay)
	}
	return nil
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
