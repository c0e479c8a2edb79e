package ashlock

import "github.com/ash-lock/ashlock/fencing"

// ValidateWrite reports whether a request carrying token may be applied to
// a resource whose highest accepted token is highest: true when token is at
// least highest. It is fencing.ValidateWrite, repeated here so that a
// program using only the lock client needs a single import.
//
// The resource, not the lock holder, makes this check: attach the guard's
// FencingToken to every request, reads included, and refuse those for
// which ValidateWrite is false. Package fencing explains why reads matter
// and offers Fence, which keeps the highest token per resource.
func ValidateWrite(token, highest uint64) bool {
	return fencing.ValidateWrite(token, highest)
}
