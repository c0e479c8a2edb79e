// Package backend defines what ashlock needs from a store that holds locks.
//
// A Backend keeps, per key, a queue of claims ordered by the token each
// received when it was created. The claim at the head of a key's queue holds
// the key. Every claim is bound to a lease; a lease lives for its TTL unless
// renewed, and when it ends every claim bound to it disappears.
//
// The root package (github.com/ash-lock/ashlock) validates keys and TTLs,
// pools leases per TTL, renews them from one watchdog per client, and turns
// claims into guards. A Backend implements only the storage side described
// here. The conformance suite in package backendtest checks an
// implementation against this contract; run it from your own tests.
//
// All methods must be safe for concurrent use. Methods that take a context
// must return promptly once it ends, with an error for which
// errors.Is(err, ctx.Err()) holds. Failures to reach the store wrap
// ErrUnavailable.
package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/ash-lock/ashlock/internal/hlc"
)

// Errors a Backend returns. Implementations wrap them (fmt.Errorf with %w or
// errors.Join) so that callers can test with errors.Is; the root package
// re-exports the same values.
var (
	// ErrLocked: a non-waiting Acquire found the key held by another claim.
	ErrLocked = errors.New("ashlock: lock is held elsewhere")
	// ErrLeaseExpired: the lease is gone (expired, revoked or unknown), or a
	// claim bound to it vanished before it could hold the key.
	ErrLeaseExpired = errors.New("ashlock: lease expired")
	// ErrUnavailable: the store could not be reached or refused the request.
	ErrUnavailable = errors.New("ashlock: backend unavailable")
	// ErrClosed: the Backend (or the client using it) has been closed.
	ErrClosed = errors.New("ashlock: closed")
	// ErrPermitMismatch: the request's permit count differs from that of
	// the claims already queued on the key (plain and shared claims count
	// as one permit).
	ErrPermitMismatch = errors.New("ashlock: permit count differs from the key's")
)

// Limits of the queue model, enforced by the root package and checked again
// by backends.
const (
	MaxPermits  = 1024     // AcquireRequest.Permits is at most this
	MaxKeys     = 64       // a multi-key request names at most this many keys
	MaxValueLen = 64 << 10 // AcquireRequest.Value and SetValue hold at most this many bytes
	// MaxValueTotal bounds a value's length times the number of keys of
	// the claim: a multi-key claim publishes its value at every key, and
	// each request that writes the claim carries every copy, while etcd
	// refuses requests over 1.5 MiB by default. Up to 8 keys take a value
	// of MaxValueLen, 64 keys one of 8 KiB. The bound leaves room for the
	// keys whatever they are: a claim on MaxKeys keys of the longest
	// length a key may have (1024 bytes, each of which the store may have
	// to escape), with the longest owner label and a value of
	// MaxValueTotal bytes in all, fits in every request backend/etcd makes
	// for it, under the longest prefix, within etcd's default limit.
	MaxValueTotal = 8 * MaxValueLen
)

// CheckValue reports why v cannot be published with a claim on keys keys
// (see MaxValueLen and MaxValueTotal), or nil if it can. The error wraps
// no sentinel: each caller wraps the one its API promises for bad input.
func CheckValue(v []byte, keys int) error {
	// Small enough to inline: every request is checked.
	if n := len(v); n > MaxValueLen || n*keys > MaxValueTotal {
		return valueError(n, keys)
	}
	return nil
}

func valueError(n, keys int) error {
	if n > MaxValueLen {
		return fmt.Errorf("value of %d bytes, more than %d", n, MaxValueLen)
	}
	return fmt.Errorf("value of %d bytes on %d keys, more than %d bytes in all", n, keys, MaxValueTotal)
}

// ContextError is the error a Backend method returns when ctx ended while
// it waited: ctx.Err(), joined with context.Cause(ctx) when the cause says
// more, so that errors.Is matches both.
func ContextError(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, err) {
		return errors.Join(err, cause)
	}
	return err
}

// Timestamp is a hybrid logical clock stamp recorded with an acquisition.
type Timestamp = hlc.Timestamp

// LeaseID names a lease within one Backend. Zero is never a valid lease.
type LeaseID int64

// Lease is a granted lease.
type Lease struct {
	ID LeaseID
	// TTL is what the store actually granted. It may exceed the requested
	// TTL (etcd rounds up to whole seconds and raises small TTLs) but never
	// falls short of it; the watchdog computes deadlines from this value.
	TTL time.Duration
}

// AcquireRequest asks for a claim on Key (or on every key of Keys) bound
// to Lease.
//
// # The queue model
//
// Every key has one queue of claims, ordered by token. A claim is of one
// of three kinds, and it holds the key once the claims ahead of it allow:
//
//   - exclusive (Shared false, Permits <= 1): no claim at all is ahead;
//   - shared (Shared true): no exclusive claim is ahead, so a run of
//     shared claims holds together and a writer queued between readers
//     keeps the readers behind it waiting (readers never starve writers);
//   - counted (Permits n > 1): fewer than n claims are ahead. Each holder
//     holds a permit number in 0..n-1 that no other holder of the key has,
//     the lowest one free when it came to hold the key, so that every
//     token issued for a permit exceeds the earlier tokens of that permit.
//
// All claims queued on a key agree on n (exclusive and shared claims count
// as n = 1): a request with another n fails with ErrPermitMismatch and
// leaves nothing behind. A multi-key request (Keys) makes one claim per key
// at once, all with the same token, and holds once it holds at every key;
// since one token orders two overlapping requests the same way at every
// key they share, multi-key requests never deadlock each other or plain
// ones.
type AcquireRequest struct {
	Key string // already validated: non-empty UTF-8, no control characters, <= 1024 bytes
	// Keys, when non-nil, asks for a claim on each of its keys at once
	// (LockAll): 1 to MaxKeys valid keys, sorted and distinct, with Keys[0]
	// equal to Key. Nil means Key alone.
	Keys []string
	// Shared asks for a shared claim; Permits must then be 0 or 1.
	Shared bool
	// Permits is the number of holders the key admits at once, 1 to
	// MaxPermits; 0 means 1. Multi-key requests use 0 or 1.
	Permits int
	// Value is published with the claim (Inspect's Holders show it); at
	// most MaxValueLen bytes, and at most MaxValueTotal bytes times the
	// number of keys. The Backend keeps its own copy.
	Value []byte
	// ID is a fresh random UUID per acquisition, or empty when the Backend
	// implements ClaimNamer. A Backend may name the claim by it, or by a
	// name of its own that no other acquisition uses meanwhile
	// (backend/etcd names claims after their lease); either way the name
	// goes into Claim.ID, and it lets a cancelled Acquire whose enqueue
	// reply was lost still find and remove its claim.
	ID    string
	Lease LeaseID
	Owner string // free-form label reported by Inspect
	// Wait false asks for TryAcquire semantics: succeed at once, if a claim
	// made now would hold every key at once, or fail with ErrLocked,
	// leaving nothing behind.
	Wait bool
	// Fair true (the usual case) queues the claim in strict FIFO order of
	// request. Fair false does not take a place in the queue: the request
	// waits until a claim made now would hold every key at once (for an
	// exclusive claim: until no claim is queued) and then takes it; queued
	// fair requests always go first. Both kinds exclude each other.
	Fair bool
	// Stamp, when non-nil, stamps the acquisition. The Backend calls it once
	// the claim holds the key, with the highest stamp recorded by earlier
	// holders of the key (zero if none), records the result so that later
	// holders see it, and returns it in Claim.Stamp. An error from Stamp
	// fails the Acquire: the claim is removed and the error returned.
	Stamp func(prev Timestamp) (Timestamp, error)
	// OnLost, when non-nil, is told at most once, after Acquire has
	// returned the claim, if the store loses the claim other than by
	// Release: its lease ended, or it was deleted by someone else. The
	// Backend calls it from its own goroutine; it must not block.
	OnLost LossListener
}

// A LossListener learns that a store lost a claim (see
// AcquireRequest.OnLost). It is an interface rather than a func so that a
// caller can pass an object it has already allocated, such as the guard
// itself, without a closure per acquisition.
type LossListener interface {
	ClaimLost(cause error)
}

// LossFunc adapts a function to a LossListener.
type LossFunc func(cause error)

// ClaimLost calls f(cause).
func (f LossFunc) ClaimLost(cause error) { f(cause) }

// AllKeys returns the keys the request claims: Keys, or Key alone.
func (r *AcquireRequest) AllKeys() []string {
	if r.Keys != nil {
		return r.Keys
	}
	return []string{r.Key}
}

// Claim is a claim that holds its key (every key of Keys, for a multi-key
// claim).
type Claim struct {
	Key  string
	Keys []string // as in the request: nil unless the claim is multi-key
	// ID is the claim's name in the store: AcquireRequest.ID or a name the
	// Backend chose. No other live claim of Key has it, but a later claim
	// of Key may reuse it once this one is gone; Token tells them apart.
	ID    string
	Lease LeaseID
	// Token is the fencing token: strictly greater than the token of every
	// earlier claim on the same key in this store, and never reused, not
	// even after a restart of the store.
	Token      uint64
	AcquiredAt time.Time // when the claim came to hold the key (store's or local clock)
	Stamp      Timestamp // zero unless the request had a Stamp function
	Shared     bool      // as in the request
	Permits    int       // as in the request, 0 read as 1
	Permit     int       // the permit held, 0..Permits-1; 0 for exclusive and shared claims
	Value      []byte    // the value published with the claim (the Backend's copy: do not modify)
}

// AllKeys returns the keys the claim holds: Keys, or Key alone.
func (c *Claim) AllKeys() []string {
	if c.Keys != nil {
		return c.Keys
	}
	return []string{c.Key}
}

// Waiter is a claim queued behind the holders of a key.
type Waiter struct {
	Owner  string
	Token  uint64
	Shared bool
}

// Holder is one claim that holds a key.
type Holder struct {
	Owner      string
	Token      uint64
	Permit     int
	Shared     bool
	Value      []byte
	AcquiredAt time.Time
	Stamp      Timestamp
}

// SameHolders reports whether a and b list the same holders (owner, token,
// permit, kind) with the same values, in the same order: an Observer
// yields a new state only when they differ.
func SameHolders(a, b LockInfo) bool {
	return slices.EqualFunc(a.Holders, b.Holders, func(h, g Holder) bool {
		return h.Token == g.Token && h.Owner == g.Owner && h.Permit == g.Permit && h.Shared == g.Shared &&
			bytes.Equal(h.Value, g.Value)
	})
}

// LockInfo describes the state of one key.
type LockInfo struct {
	Key        string
	Held       bool
	Owner      string    // oldest holder's label; empty when not held
	Token      uint64    // oldest holder's fencing token; 0 when not held
	AcquiredAt time.Time // zero when not held
	Stamp      Timestamp // oldest holder's stamp, if it had one
	Permits    int       // the permit count the key's claims agree on; 0 when none is queued
	Holders    []Holder  // every holder, oldest first (one for an exclusive lock)
	Waiters    []Waiter  // fair waiters in queue order
}

// Backend is a store for lock claims.
type Backend interface {
	// Grant creates a lease that ends ttl after the request was sent unless
	// renewed. It returns the TTL actually granted (>= ttl).
	Grant(ctx context.Context, ttl time.Duration) (Lease, error)

	// KeepAlive renews a lease and returns the TTL it was renewed for,
	// counted from when the request was sent. A lease that has already
	// ended yields an error wrapping ErrLeaseExpired, never a renewal.
	KeepAlive(ctx context.Context, id LeaseID) (time.Duration, error)

	// Revoke ends a lease at once, removing every claim bound to it.
	// Revoking a lease that has already ended is not an error.
	Revoke(ctx context.Context, id LeaseID) error

	// Acquire creates a claim on req.Key bound to req.Lease (named req.ID
	// or by the Backend, see AcquireRequest.ID) and, if req.Wait, blocks
	// until the claim holds the key. It waits without polling, and a
	// release wakes only the waiter next in line.
	//
	// On success the claim holds the key. On failure nothing is left
	// behind: a claim created for the request is removed, even when ctx has
	// ended (the Backend uses a bounded context of its own for that).
	// Errors: ErrLocked (req.Wait false and the key is held),
	// ErrPermitMismatch (see AcquireRequest), ErrLeaseExpired
	// (the lease or the claim vanished while waiting), ErrUnavailable,
	// ErrClosed, or ctx's error joined with the cause.
	Acquire(ctx context.Context, req AcquireRequest) (Claim, error)

	// Release removes the claim if, and only if, the store still has it
	// with the same ID and token; it never removes another claim, so a
	// retried or late Release is harmless. Releasing a claim that is
	// already gone returns nil. After Release returns nil, OnLost is not
	// called for that claim.
	Release(ctx context.Context, c Claim) error

	// SetValue replaces the value published with c (on every key of a
	// multi-key claim) in one write that compares on the claim's identity.
	// If the store no longer has the claim it changes nothing and returns
	// an error wrapping ErrLeaseExpired. v is at most MaxValueLen bytes,
	// and len(v) times the claim's number of keys at most MaxValueTotal.
	SetValue(ctx context.Context, c Claim, v []byte) error

	// Inspect reports the state of key. A free key gives Held == false and
	// a nil error.
	Inspect(ctx context.Context, key string) (LockInfo, error)

	// Close releases the Backend's own resources (connections, goroutines).
	// It does not wait for, or remove, claims. Later calls return ErrClosed.
	Close() error
}

// Local is an optional interface for a Backend that keeps its state in this
// process and never waits on I/O, such as backend/memory. The client relies
// on two properties of such a backend to keep per-call contexts off its hot
// path: Release and Revoke complete at once whatever their context, and
// Revoke ends every Acquire waiting on the revoked lease. Do not implement
// it for a backend that talks to anything outside the process.
type Local interface {
	Backend
	// Local marks the backend; it is never called.
	Local()
}

// ClaimNamer is an optional interface for a Backend that names every claim
// itself and so needs no AcquireRequest.ID: the client then leaves ID empty
// instead of making a UUID for each acquisition. Such a Backend still puts
// a non-empty name in Claim.ID that no other live claim of the key has, and
// still finds and removes the claim of a failed Acquire whose enqueue reply
// was lost (backend/etcd keeps each claim's name to itself until then).
type ClaimNamer interface {
	Backend
	// NamesClaims marks the backend; it is never called.
	NamesClaims()
}

// Observer is an optional interface for a Backend that can report the
// changes of a key's holders as they happen, without polling. Elections
// (ashlock's Election.Observe) need it.
type Observer interface {
	Backend
	// Observe yields the state of key (as Inspect reports it) first, then
	// a new state after every change of its holders: a claim coming to
	// hold or leaving, or a holder's value changing (SetValue). States
	// come in the order the store applied the changes; a change of the
	// waiters or of a stamp alone need not be reported, and a state equal
	// to the last one yielded may be (callers compare). The LockInfo
	// values belong to the caller only as far as reading goes: do not
	// modify their slices.
	//
	// Interruptions (a failed watch, a reconnection, a store restart) are
	// the Backend's to recover from, resuming where it was so that no
	// change is skipped; only if the store no longer has the history
	// needed (etcd compacted it) does it read the state again, and
	// changes inside that gap may then be missed, never reordered.
	//
	// The sequence ends without an error when ctx ends. When the Backend
	// is closed it yields an error wrapping ErrClosed once and ends; an
	// error it cannot recover from (ErrUnavailable for good, a record it
	// cannot read) is likewise yielded once, last.
	Observe(ctx context.Context, key string) iter.Seq2[LockInfo, error]
}
