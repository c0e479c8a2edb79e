package fencing

// ValidateWrite reports whether a request carrying token may be applied to
// a resource whose highest accepted token is highest: true when token is at
// least highest. An equal token is the current holder's; a larger one is a
// newer holder's, after which the caller should raise its mark to token.
// A smaller token is a stale holder's and must be refused.
//
// ValidateWrite only compares; keeping the mark is the caller's job (Fence
// does it per resource).
func ValidateWrite(token, highest uint64) bool {
	return token >= highest
}
