// Package fencing is the resource side of fencing tokens: the check a
// protected resource makes so that a lock holder who has lost its lock
// cannot change it. It has no dependencies beyond the standard library, so
// a storage service can use it without importing the lock client.
//
// # Why a lock is not enough
//
// A distributed lock is a lease. Its holder can stop running for longer
// than the lease lasts (a garbage-collection pause, a suspended VM, a
// stalled disk) without noticing: when it resumes it still believes it
// holds the lock, while the lock service has already granted it to someone
// else. Nothing the lock client does can stop the old holder's next
// request, because that request is issued before the client gets a chance
// to look at a clock. Only the resource, which sees both holders' requests
// in the order they arrive, can tell them apart.
//
// Every acquisition of a lock key comes with a fencing token, larger than
// the token of every earlier acquisition of that key. A client sends its
// token with each request to the resource. The resource keeps the highest
// token it has accepted (its high-water mark) and turns away any request
// carrying a smaller one. An equal token is accepted: it is the current
// holder making another request. ValidateWrite is that comparison; Fence
// keeps the marks for many resources at once.
//
// # Reads must be fenced too
//
// Fencing only writes is not enough for a read-modify-write. Take an
// account holding 100 and two clients that each add to it:
//
//  1. A acquires the lock with token 7 and reads 100.
//  2. A pauses; its lease runs out. B acquires the lock with token 8 and
//     reads 100.
//  3. A wakes up and writes 100+10 with token 7. The resource has seen
//     nothing above 7 yet, so the write is accepted.
//  4. B writes 100+20 with token 8, which is accepted too. A's deposit is
//     gone, although every write carried a valid-looking token.
//
// If B's read in step 2 also presents token 8, the mark rises to 8 before
// A writes, and A's write in step 3 is refused: A has to acquire the lock
// again and start over from a fresh read. So present the token on every
// request that later writes may depend on, reads included; the stale
// holder's read-modify-write is then stopped at its write, which is the
// only point where it could do harm.
//
// # Check and apply together
//
// Admitting a token and applying the request it carries must be one step
// as far as other requests to the same resource are concerned: hold the
// resource's own lock across both, or do both in one transaction.
// Otherwise a stale request could pass the check, be overtaken by a newer
// request, and then be applied on top of it.
//
// # What a Fence remembers
//
// A Fence keeps one mark per resource name for as long as the Fence lives;
// forgetting a mark would let an old token through again. Use names from a
// bounded set (usually the lock keys). A Fence lives in memory: a resource
// that must reject stale requests across its own restarts should store the
// highest token next to its data and compare with ValidateWrite instead.
// Tokens are comparable only among acquisitions of the same lock key, so
// give each key its own resource name.
//
// # Shared holders
//
// The readers of a shared (read/write) lock hold the key together, each with
// a token of its own, and their requests reach the resource in any order.
// Admit would let a later reader's token turn an earlier reader away, so
// readers use AdmitShared: it refuses only tokens older than the last
// exclusive holder's, and raises the mark that exclusive holders are
// checked against. A writer older than any admitted reader, and a reader
// older than the last admitted writer, are both refused.
package fencing
