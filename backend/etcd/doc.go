// Package etcd is an ashlock backend that keeps lock claims in etcd v3, for
// locking across processes and machines.
//
// Create one with New from a *clientv3.Client you configure and own
// (endpoints, TLS, authentication), and pass it to ashlock.ConnectWith, or
// let ashlock.Connect build both from an "etcd://host:2379/prefix/" seed
// (see ParseSeed). Everything the Backend reads or writes is under its
// prefix, so an etcd role with read-write permission on that prefix range
// is enough.
//
// # Keys
//
//	<prefix>claims/<escaped key>/<lease>[-<slot>] a claim; value: owner, acquired-at, stamp
//	<prefix>stamps/<escaped key>                  last holder's stamp (only with stamps on)
//
// The escaping replaces '/', '%' and control bytes with %XX, so the queue
// directories of two keys never nest, even when one key is a prefix of the
// other. A claim is named after the lease it is bound to, in hex, with a
// slot number for a second or later claim of the same lease on the same key
// at once. Stamp records are not bound to a lease: they outlive every
// claim, so that the next holder, however much later, sees the last stamp.
//
// # Protocol
//
// The files read in this order: acquire.go (enqueue, and the paths that do
// not queue), wait.go (waiting in the queue), release.go (release, and the
// cleanup of a failed Acquire), registry.go (claim names and loss),
// watch.go, watchstream.go and watchcheck.go (the watches, all on one
// stream), lease.go.
//
// A key's claims form a queue ordered by create revision; the oldest claim
// holds the key and its create revision is the fencing token. Create
// revisions are etcd's global, persistent revision counter, so tokens
// strictly increase per key and survive client and server restarts.
//
//   - Acquire (fair): one Txn creates the claim if it does not exist yet and
//     reads the claim just ahead of it. Uncontended, that single round trip
//     makes it the holder. Contended, it watches only that claim's delete,
//     then checks in one Txn that its own claim still exists and that no
//     older claim is left (it may have to wait for another).
//   - TryAcquire (Wait false): one Txn creates the claim only if the queue
//     is empty; a held key costs one round trip and leaves nothing behind.
//   - Fair false: the same Txn, repeated each time the newest claim of the
//     queue is deleted, until it finds the queue empty. Such a request never
//     queues, so fair requests always go first.
//   - Release: one Txn that deletes the claim only if its create revision
//     still equals the token. Unlike clientv3/concurrency.Mutex.Unlock, a
//     retried or late Release can never delete a later claim.
//   - A failed or cancelled Acquire removes its claim with a bounded context
//     of its own, never the caller's (which has often ended), by name alone
//     if the reply that would have told its create revision was lost.
//   - Stamps cost one extra round trip per acquisition: the previous stamp
//     is read in the Txn that makes the claim the holder, and the new stamp
//     written in a Txn guarded by the claim's identity.
//
// # Claim names
//
// Naming a claim after its lease reuses one name for every acquisition of
// a key under that lease, as etcd's own Mutex does with its session-named
// key. That matters because etcd keeps a deleted key in its index until
// compaction, and every read of a queue directory walks the dead keys in
// it: a fresh name per acquisition would slow every later Acquire of a busy
// key. A name stays taken by its claim, inside the Backend, until the claim
// is known to be gone from etcd (a delete of it succeeded, its watch saw it
// go, or its lease ended), so no two acquisitions ever share one, and the
// cleanup of a failed Acquire can delete its claim by name alone. Reuse
// costs no safety: a claim's identity is name plus create revision, and
// each claim under a name has a higher create revision than the last.
//
// # Watches
//
// A claim that has been held for 2ms is watched on its own key, for its
// delete only, so that its loss - its lease expired or revoked, an
// operator's delete - reaches OnLost within one watch delivery. Most locks
// are released sooner and never cost a watch; a loss in a claim's first
// moments is found when its watch starts, by a read of the claim's key. A
// claim waiting in the queue is watched once it has waited a second: the
// check after each wake finds a deleted claim anyway, and the watch only
// ends such a wait sooner. A fair waiter also watches the claim just ahead
// of it, on that claim's key, so a release sends an event to the one client
// waiting behind it, not to every client under the prefix. All of a
// Backend's watches share one gRPC watch stream and two goroutines,
// however many locks it holds; the stream is opened again when it fails or
// its etcd member loses the leader, and every watch resumes from where it
// was or, if etcd compacted that revision away, is settled by reading its
// key.
//
// # Leases
//
// etcd leases are whole seconds: Grant rounds a TTL up, never down, and
// reports what etcd granted (etcd raises TTLs below its minimum). KeepAlive
// renews one lease once per call; when to renew is the caller's decision,
// not a background timer's.
package etcd
