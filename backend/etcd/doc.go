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
//	<prefix>claims/<escaped key>/<claim name> a claim; value: owner, acquired-at, stamp
//	<prefix>stamps/<escaped key>              last holder's stamp (only with stamps on)
//
// The escaping replaces '/', '%' and control bytes with %XX, so the queue
// directories of two keys never nest, even when one key is a prefix of the
// other. Claims are bound to a lease. Stamp records are not: they outlive
// every claim, so that the next holder, however much later, sees the last
// stamp. There is one small stamp record per key ever stamped.
//
// # Protocol
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
//   - Release: one request that deletes the claim only if it is still the
//     same incarnation. A retried, late or misaddressed Release is a Txn
//     that compares the create revision with the token; the release of a
//     claim this Backend still has as held is a plain Delete of its key,
//     because the claim's name is lent to that claim alone until then (see
//     Claim names). Unlike clientv3/concurrency.Mutex.Unlock, a retried or
//     late Release can never delete a later claim.
//   - A failed or cancelled Acquire removes its claim with a bounded context
//     of its own, never the caller's (which has often ended).
//   - Stamps cost one extra round trip per acquisition: the previous stamp
//     is read in the Txn that makes the claim the holder, and the new stamp
//     written in a Txn guarded by the claim's identity.
//
// # Claim names
//
// Claim names are lent, not minted. A claim's name is a random UUID that
// the Backend lends to one Acquire at a time; it is returned as Claim.ID
// (AcquireRequest.ID is not used). Each Backend keeps a few free names per
// lock key (for at most a few thousand keys) and a name goes back to them
// only once the claim under it is known to be gone from etcd: the release
// Txn succeeded, or the removal of a failed Acquire's claim did. A name
// whose fate is unknown (a failed release, a removal still being retried)
// is not lent again. So a name is never used by two acquisitions at once,
// and a failed Acquire can remove its claim by name alone even when the
// reply of the Txn that created it was lost.
//
// Why reuse: etcd keeps a deleted key in its index until compaction, and a
// read of a queue directory visits every dead key in it. With a fresh name
// per acquisition a busy key's directory would fill with dead names and
// every Acquire would slow down until the next compaction; with lent names
// a key taken by one Backend again and again keeps one or two names. Reuse
// costs no safety: a claim's identity is name plus create revision, and
// each incarnation of a name has a higher create revision than the last, so
// tokens still strictly increase and a late Release or IsOwner aimed at an
// earlier incarnation never matches a later one.
//
// # Watches
//
// Each claim the Backend is acquiring or holding is watched on its own key,
// for its delete only, from the revision after its creation: a claim
// deleted by lease expiry, lease revocation or an operator reaches its
// holder's OnLost within one watch delivery, typically milliseconds, even
// if the delete happened before the watch reached etcd. Claims of a key
// taken for short holds go without a watch: a claim that has none when it
// is made gets one only once it has existed for the claim watch delay (5ms
// to 10ms by default, see WithClaimWatchDelay), and a loss before then is
// reported when the watch starts, by a read of the claim's key. A fair waiter
// watches the claim just ahead of it the same way. So a release sends an
// event to the one client waiting behind it, not to every client under the
// prefix. All of a Backend's watches share one gRPC watch stream and two
// goroutines, however many locks it holds; the stream is opened again when
// it fails or its etcd member loses the leader, and every watch resumes
// from where it was, or, if etcd compacted that revision away, is settled
// by reading its key. A released claim's watch is not cancelled but kept
// with its free name, and the next claim under that name takes it over: a
// key held for long stretches again and again costs one watch in all, and
// each release one delete event. A claim released within the delay gives
// its watch up instead, so a key taken again and again for short holds
// costs no watch traffic at all.
//
// # Leases
//
// etcd leases are whole seconds: Grant rounds a TTL up, never down, and
// reports what etcd granted (etcd raises TTLs below its minimum). KeepAlive
// renews one lease per call over one long-lived keep-alive stream per
// Backend; when to renew is the caller's decision, not a background timer's.
package etcd
