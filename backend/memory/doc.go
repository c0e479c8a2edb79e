// Package memory is an in-process implementation of backend.Backend: the
// store ashlock uses by default, and a test double for code that takes a
// backend.Backend.
//
// It keeps the same model as the etcd backend: per key, a queue of claims
// ordered by fencing token; every claim bound to a lease that ends after
// its TTL unless renewed. A claim is exclusive, shared or counted, and
// holds its key once the claims ahead of it allow (see
// backend.AcquireRequest): an exclusive claim at the head, a
// shared one with no exclusive claim ahead, one of n permits with fewer
// than n claims ahead. A multi-key claim has one place in each of its keys'
// queues, all with one token, and holds once it holds at every key. Tokens
// come from one counter per Backend, so they strictly increase per key and
// are never reused while the Backend lives (a new Backend starts again from
// 1: it keeps nothing across process restarts).
//
// Waiting costs no goroutine and no polling. Each waiting request blocks on
// a channel of its own, and whoever removes a claim wakes only the requests
// that now hold: after a counted holder, the next waiter; after a writer,
// the readers up to the next writer. Leases expire from one timer each,
// scheduled on the Backend's Clock.
//
// For tests of code built on ashlock the Backend offers an injectable clock
// (WithClock, ManualClock; the default real clock also follows the fake time
// of a testing/synctest bubble) and fault hooks: FailRenewals,
// DelayRenewals, ExpireLease, ExpireKey and DeleteClaim.
package memory
