package memory

import (
	"errors"
	"fmt"

	"github.com/ash-lock/ashlock/backend"
)

// ErrInvalidRequest is returned by Acquire and SetValue for a request
// outside the queue model's limits (see backend.AcquireRequest): a shared
// or multi-key request with more than one permit, permits outside
// 0..backend.MaxPermits, keys not sorted and distinct or not starting with
// Key, more than backend.MaxKeys keys, or a value over
// backend.MaxValueLen bytes or over backend.MaxValueTotal bytes for all
// the keys together. The root package validates requests first, so
// this is a programmer's error; nothing is left behind.
var ErrInvalidRequest = errors.New("memory: invalid request")

// validate checks req against the queue model's limits. It looks only at
// the request, so it runs before the Backend's mutex is taken.
func validate(req *backend.AcquireRequest) error {
	if err := backend.CheckValue(req.Value, max(len(req.Keys), 1)); err != nil {
		return invalid(req, "%v", err)
	}
	switch {
	case req.Permits < 0 || req.Permits > backend.MaxPermits:
		return invalid(req, "permits %d outside 0..%d", req.Permits, backend.MaxPermits)
	case req.Shared && req.Permits > 1:
		return invalid(req, "a shared claim takes one permit, not %d", req.Permits)
	case req.Keys == nil:
		return nil
	case len(req.Keys) == 0 || len(req.Keys) > backend.MaxKeys:
		return invalid(req, "%d keys, want 1..%d", len(req.Keys), backend.MaxKeys)
	case req.Keys[0] != req.Key:
		return invalid(req, "Keys[0] is %q, not Key", req.Keys[0])
	case req.Permits > 1:
		return invalid(req, "a multi-key claim takes one permit, not %d", req.Permits)
	}
	for i := 1; i < len(req.Keys); i++ {
		if req.Keys[i-1] >= req.Keys[i] {
			return invalid(req, "keys not sorted and distinct: %q before %q", req.Keys[i-1], req.Keys[i])
		}
	}
	return nil
}

func invalid(req *backend.AcquireRequest, format string, args ...any) error {
	return fmt.Errorf("memory: acquire %q: %w: %s", req.Key, ErrInvalidRequest, fmt.Sprintf(format, args...))
}
