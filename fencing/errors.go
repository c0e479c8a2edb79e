package fencing

import (
	"errors"
	"strconv"
)

// ErrStaleToken is the sentinel for a refused token. Errors from Admit wrap
// it; test with errors.Is, or use errors.As with *StaleTokenError for the
// details.
var ErrStaleToken = errors.New("fencing: stale token")

// StaleTokenError reports a token refused because a higher one was already
// admitted for the same resource. It wraps ErrStaleToken.
type StaleTokenError struct {
	Resource string // the resource the request was for
	Token    uint64 // the refused token
	Highest  uint64 // the resource's mark when the token was refused; > Token
}

// Error describes the refusal, naming the resource and both tokens.
func (e *StaleTokenError) Error() string {
	return ErrStaleToken.Error() + " " + strconv.FormatUint(e.Token, 10) +
		" for resource " + strconv.Quote(e.Resource) +
		": token " + strconv.FormatUint(e.Highest, 10) + " already admitted"
}

// Unwrap returns ErrStaleToken, so that errors.Is(err, ErrStaleToken) holds.
func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }
