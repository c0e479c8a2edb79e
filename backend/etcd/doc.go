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
//	<prefix>claims/<escaped key>/<lease>[-<slot>]      an exclusive claim
//	<prefix>claims/<escaped key>/s<lease>[-<slot>]     a shared claim
//	<prefix>claims/<escaped key>/<lease>[-<slot>].<n>  a counted claim (n > 1 permits)
//	<prefix>stamps/<escaped key>                       last holder's stamp (only with stamps on)
//	<prefix>fences/<lease>                             the lease's fence (only after a lost reply)
//
// A claim's value is its record (record.go): the permit held (none yet
// while a counted claim waits), owner, acquired-at, stamp and the published
// value; its kind is in its name alone. A stamp record is the same record
// with the stamp alone set.
//
// The escaping replaces '/', '%' and control bytes with %XX, so the queue
// directories of two keys never nest, even when one key is a prefix of the
// other. A claim is named after the lease it is bound to, in hex, with a
// slot number for a second or later claim of the same lease on the same key
// at once, and its kind (kind.go): shared names start with 's', the others
// with a hex digit, so the range [dir+"0", dir+"g") of a queue directory
// holds exactly its non-shared claims. A multi-key claim has one etcd key
// in each of its keys' directories, all with the same name and the same
// create revision. Stamp records are not bound to a lease: they outlive
// every claim, so that the next holder, however much later, sees the last
// stamp.
//
// # Protocol
//
// The files read in this order: acquire.go (one acquisition over a claim's
// key set: enqueue, and the paths that do not queue), kind.go (the kinds
// as a table, and their names), wait.go (waiting in the queue), adopt.go
// (a claim found under our name), counted.go (the counted kind's permit),
// multikey.go (what a claim on several keys adds), stamp.go, release.go
// (release, and the cleanup of a failed Acquire), fence.go (what keeps a
// create applied late from making a claim), value.go (SetValue),
// inspect.go, registry.go (claim names and loss), watch.go,
// watchstream.go, watchcheck.go and watchrange.go (the watches, all on
// one stream), observe.go, lease.go.
//
// A key's claims form a queue ordered by create revision, and each claim's
// create revision is its fencing token. Create revisions are etcd's
// global, persistent revision counter, so tokens strictly increase per key
// and survive client and server restarts. Who holds is the queue rule of
// package backend (backend.Admits), and a counted claim holds once it has
// also recorded the permit backend.PermitFor gives it. Inspect and
// Observe hand the queue to backend.Describe. etcd's Txns test the rule
// with compares on create revisions over a key range, which the kinds
// choose (kind.go): every claim of the queue directory for an exclusive
// or counted claim, its non-shared claims for a shared one. Every claim
// is a set of keys, one for a plain lock, each with an etcd key under the
// same name, all made in one Txn and so with one create revision:
//
//   - Acquire (fair): one Txn creates the claim at every key if its name
//     is absent everywhere, and reads at each key the newest claim that
//     blocks it. Uncontended, that single round trip makes it the holder.
//     Contended, it waits at one key at a time: it watches only the delete
//     of the claim that blocks it there, then checks in one Txn that its
//     own claim still exists and that nothing older blocks it (it may have
//     to wait for another). The delete event carries the claim's last
//     state; when that shows an exclusive claim admitted after waiting,
//     nothing older can be left and the Txn compares the waiter's own
//     claim alone (see heldBefore in wait.go), so that a handoff costs no
//     compare over the queue. A writer's release thus wakes the next writer,
//     or every reader up to the next writer at once, one watch event each.
//     A multi-key claim that waited checks at the end, in one Txn, that it
//     still exists at every key. No deadlock: at every key a claim waits
//     only for claims with lower tokens.
//   - TryAcquire (Wait false): one Txn creates the claim at every key only
//     if no claim blocks it at any; a held key costs one round trip and
//     leaves nothing behind.
//   - Fair false: the same Txn, repeated each time the claim that blocked
//     it is deleted, until it succeeds. Such a request never queues, so
//     fair requests always go first.
//   - Counted claims (counted.go) enqueue with a nested Txn that records
//     permit 0 at once when the queue was empty (one round trip
//     uncontended); otherwise the claim records its permit, in a Txn
//     guarded by its identity, once every older claim has recorded its own
//     (backend.PermitFor). A waiter watches what backend.WaitFor names: its
//     predecessor, for its delete and its admission, or for the first
//     waiter the n holders' deletes, with one watch of the queue
//     directory; each admission costs a constant number of requests.
//   - Every claim of a key agrees on the permit count (exclusive and
//     shared claims count as one): an enqueue reads the name of the claim
//     just ahead, and a request that disagrees removes its claim and fails
//     with backend.ErrPermitMismatch (see agrees in kind.go).
//   - A claim found under our name (a write applied after its sender gave
//     up on it) is taken over by an enqueue if it is one claim of ours,
//     and removed by a request that does not queue (adopt.go).
//   - Stamps cost one extra round trip per acquisition of a single key:
//     the previous stamp is read in the Txn that makes the claim the
//     holder, and the new stamp written in a Txn guarded by the claim's
//     identity at every key; a multi-key claim reads its keys' stamps in
//     one more Txn (stamp.go).
//   - Release (release.go): one request that deletes the claim at every
//     key. A claim this Backend handed out and still has as held is
//     deleted by name: the name is this claim's alone until the Backend
//     forgets it (see Claim names). Any other Release - late, retried,
//     lost - deletes only if the claim's create revision still equals the
//     token. Unlike clientv3/concurrency.Mutex.Unlock, a retried or late
//     Release can never delete a later claim.
//   - A failed or cancelled Acquire removes its claim with a bounded
//     context of its own, never the caller's (which has often ended). If
//     the reply that would have told its create revision was lost, it
//     deletes by name and moves its lease's fence in the same Txn: every
//     Txn that creates a claim compares that fence, so the create, applied
//     late, makes nothing (fence.go).
//   - SetValue (value.go) rewrites the claim's record at every key in one
//     Txn compared on the claim's identity.
//
// Every request fits in etcd's default limits, whatever the keys and value
// allowed (multikey.go): a request that does not queue, or a stamp's
// write, that would not fit with its reads sends them in a second request,
// after its compares failed.
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
// cleanup of a failed Acquire can delete its claim by name alone. A
// multi-key claim lost at one key is gone only once the Backend has
// deleted it at the others. A create that got no answer cannot make a
// claim under the name later, once its cleanup has moved the lease's
// fence (fence.go); a Release whose delete by name got no answer keeps
// the name taken until the lease ends, since that delete, applied late,
// would remove whatever claim has the name then. Reuse costs no safety: a
// claim's identity is name plus create revision, and each claim under a
// name has a higher create revision than the last.
//
// # Watches
//
// A claim that has been held for 5ms is watched on its own key (on each
// of a multi-key claim's keys), for its delete only, so that its loss - its
// lease expired or revoked, an operator's delete - reaches OnLost within
// one watch delivery. Most locks
// are released sooner and never cost a watch; a loss in a claim's first
// moments is found when its watch starts, by a read of the claim's key. A
// claim waiting in the queue is watched once it has waited a second: the
// check after each wake finds a deleted claim anyway, and the watch only
// ends such a wait sooner. A fair waiter also watches the claim it waits
// for, on that claim's key, so a release sends an event to the clients
// waiting directly behind it, not to every client under the prefix: the
// one exclusive or counted waiter next in line, or the readers queued up
// to the next writer. (A counted waiter watches its predecessor for its
// rewrite too, and the first counted waiter the deletes in its queue
// directory, for any of the n holders.) All of a Backend's watches share
// one gRPC watch stream and two goroutines,
// however many locks it holds; the stream is opened again when it fails or
// its etcd member loses the leader, and every watch resumes from where it
// was or, if etcd compacted that revision away, is settled by reading its
// key. An Observe (observe.go) is one range watch of its key's queue
// directory on the same stream, resumed the same way, and resynchronised
// by one read of the directory after a compaction.
//
// # Leases
//
// etcd leases are whole seconds: Grant rounds a TTL up, never down, and
// reports what etcd granted (etcd raises TTLs below its minimum). KeepAlive
// renews one lease once per call; when to renew is the caller's decision,
// not a background timer's.
package etcd
