package backend

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Errors for bad input, returned by the root package's builders and by
// every Backend for a request that breaks the limits below; the root
// package re-exports them.
var (
	// ErrInvalidKey: a key that is empty, longer than MaxKeyLen, not
	// valid UTF-8 or holding a control character; or a multi-key request
	// with no key or a key twice.
	ErrInvalidKey = errors.New("ashlock: invalid key")
	// ErrInvalidConfig: a request or setting outside the model's limits
	// (permits, number of keys, value length, owner label, kinds that do
	// not combine).
	ErrInvalidConfig = errors.New("ashlock: invalid configuration")
)

// Limits on keys and owner labels, which every store keeps with each claim.
const (
	MaxKeyLen   = 1024 // bytes
	MaxOwnerLen = 256  // bytes of UTF-8
)

// CheckKey reports why key cannot name a lock, or nil. The error wraps
// ErrInvalidKey.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	// Every request is checked, and most keys are ASCII: one pass over
	// the bytes settles those.
	for i := 0; i < len(key); i++ {
		b := key[i]
		if b >= utf8.RuneSelf {
			return checkKeyRunes(key)
		}
		if b < 0x20 || b == 0x7f {
			return fmt.Errorf("%w: control character %U at byte %d", ErrInvalidKey, rune(b), i)
		}
	}
	return nil
}

// checkKeyRunes is CheckKey for a key that is not all ASCII.
func checkKeyRunes(key string) error {
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	for i, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: control character %U at byte %d", ErrInvalidKey, r, i)
		}
	}
	return nil
}

// CheckRequest reports every way req breaks the queue model's limits,
// joined, or nil: the keys (each valid; for a multi-key request 1 to
// MaxKeys of them, sorted and distinct, Keys[0] equal to Key), the
// permits (0 to MaxPermits; more than one only for a plain single-key
// claim), the value (CheckValue) and the owner label (valid UTF-8, at
// most MaxOwnerLen bytes). Errors wrap ErrInvalidKey or ErrInvalidConfig.
// It looks at nothing but req, so a Backend calls it before touching its
// store and leaves nothing behind on failure.
func CheckRequest(req *AcquireRequest) error {
	// Every request is checked twice, by the root and again by the
	// Backend, so the common one - one key of printable ASCII, at most
	// one permit, a value within MaxValueLen, an ASCII owner label - is
	// passed with one look at each field. Anything else, valid or not,
	// takes the full check, which lists every problem.
	if req.Keys == nil && uint(req.Permits) <= 1 && len(req.Value) <= MaxValueLen &&
		len(req.Owner) <= MaxOwnerLen && printableKey(req.Key) && ascii(req.Owner) {
		return nil
	}
	return checkRequest(req)
}

// checkRequest is CheckRequest without the fast path.
func checkRequest(req *AcquireRequest) error {
	var errs []error
	bad := func(sentinel error, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...)))
	}
	if req.Keys == nil {
		if err := CheckKey(req.Key); err != nil {
			errs = append(errs, err)
		}
	} else {
		switch n := len(req.Keys); {
		case n == 0:
			bad(ErrInvalidKey, "a multi-key request without keys")
		case n > MaxKeys:
			bad(ErrInvalidConfig, "%d keys, more than %d", n, MaxKeys)
		case req.Keys[0] != req.Key:
			bad(ErrInvalidConfig, "Keys[0] is %q, not Key %q", req.Keys[0], req.Key)
		}
		for i, k := range req.Keys {
			if err := CheckKey(k); err != nil {
				errs = append(errs, err)
			}
			if i > 0 && req.Keys[i-1] >= k {
				bad(ErrInvalidKey, "keys not sorted and distinct: %q before %q", req.Keys[i-1], k)
			}
		}
	}
	switch {
	case req.Permits < 0 || req.Permits > MaxPermits:
		bad(ErrInvalidConfig, "%d permits, not in 1..%d", req.Permits, MaxPermits)
	case req.Shared && req.Permits > 1:
		bad(ErrInvalidConfig, "a shared lock with %d permits", req.Permits)
	case req.Keys != nil && req.Permits > 1:
		bad(ErrInvalidConfig, "a multi-key lock with %d permits", req.Permits)
	}
	if err := CheckValue(req.Value, max(len(req.Keys), 1)); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	if err := CheckOwner(req.Owner); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// CheckOwner reports why label cannot be a claim's owner label, or nil.
// The error wraps ErrInvalidConfig.
func CheckOwner(label string) error {
	if len(label) > MaxOwnerLen || !utf8.ValidString(label) {
		return errBadOwner
	}
	return nil
}

var errBadOwner = fmt.Errorf("%w: owner label must be at most %d bytes of UTF-8", ErrInvalidConfig, MaxOwnerLen)

// printableKey reports whether key is 1 to MaxKeyLen bytes of printable
// ASCII (0x20 to 0x7e), which CheckKey accepts.
func printableKey(key string) bool {
	if key == "" || len(key) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i]-0x20 > 0x7e-0x20 { // wraps below 0x20
			return false
		}
	}
	return true
}

// ascii reports whether s is all ASCII, and so valid UTF-8.
func ascii(s string) bool {
	var or byte
	for i := 0; i < len(s); i++ {
		or |= s[i]
	}
	return or < utf8.RuneSelf
}
