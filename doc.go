// Package ashlock provides distributed locks with fencing tokens.
//
// A LockClient hands out builders; a builder acquires a lock through a
// backend (in-process by default, etcd v3 for locks shared across processes
// and machines) and returns a Guard. The guard carries a fencing token, and
// the client's watchdog renews its lease in the background and poisons the
// guard the moment the lease can no longer be trusted.
//
//	client, err := ashlock.Connect(ctx, ashlock.LockConfig{})
//	...
//	err = client.Lock("orders/42").WithTTL(10*time.Second).Do(ctx,
//		func(ctx context.Context, token uint64) error {
//			return store.Write(ctx, token, order) // the store checks the token
//		})
//
// # Kinds of lock, and elections
//
// Besides the mutex, a LockBuilder takes shared (read) locks
// (LockBuilder.Shared; readers hold a key together, a writer alone, FIFO)
// and counted locks with numbered permits (LockBuilder.WithPermits,
// Guard.Permit), and LockClient.LockAll takes up to 64 keys all or
// nothing, deadlock-free, under one token. A claim may publish a value
// (LockBuilder.WithValue, Guard.SetValue) that LockClient.Inspect lists
// with every holder. All of them are queues of claims with the same tokens,
// watchdog and loss signal as the mutex; fencing.Fence.AdmitShared checks
// shared holders' tokens.
//
// An Election (LockClient.Election) is a lock whose holder leads and
// publishes a value; the guard's fencing token is the term. Campaign
// blocks until the caller leads; Run is the whole leader loop, calling its
// function once per term with a context cancelled (cause ErrLeaseExpired)
// the moment the term is lost; Leader reads who leads (ErrNoLeader when
// nobody does); Observe yields the current Leader, then every change in
// order, "no leader" included.
//
// # What a lock cannot promise
//
// No lease-based lock can stop a holder that is paused (a long garbage
// collection, a frozen VM, a stalled disk, a process stopped by a debugger)
// from waking up after its lease has run out, while another process holds
// the same key, and carrying on with its critical section. The paused
// holder cannot notice in time, because noticing needs it to run. ashlock
// makes the window as small as it can - a guard stops being valid a safety
// margin before the store could expire it, measured from when the last
// renewal was sent, on the monotonic clock, even if the renewal call is
// still hanging - but only the resource can close it.
//
// Fencing closes it. Every acquisition gets a token strictly greater than
// every earlier token for the key (on etcd, the revision at which the claim
// was written, so tokens survive restarts). Pass the token with every write
// and have the resource refuse a token lower than the highest it has
// accepted: package fencing does that for a resource you run, and on etcd a
// guard's claim gives a comparison for your own transaction. Fence reads
// too: a stale holder's read-modify-write must fail at the write.
//
// # Loss
//
// A guard ends when it is unlocked, when its client closes, or when it is
// poisoned: no renewal was acknowledged in time, the backend reports the
// lease gone, or the claim was deleted (for example by an operator). Done
// closes at that moment, Err and FencingToken return ErrLeaseExpired, and
// the context Do gives its function is cancelled with that cause. Losing a
// lease poisons only the guards that shared it; it never panics.
//
// # Cost
//
// Guards with the same TTL and renewal interval share one backend lease,
// and one goroutine per client renews every lease, so holding many locks
// costs memory per guard but no goroutine and no extra renewal traffic.
//
// # Hazards
//
//   - A Guard protects the key only while Err is nil. Check the fencing
//     token at the resource; do not rely on timing.
//   - Keep TTLs well above the longest pause you expect: a pause longer
//     than TTL minus the margin loses the lock.
//   - Unlock and Close use bounded contexts of their own so that releasing
//     still works when the caller's context has ended.
//   - A Guard that becomes unreachable without Unlock is released when the
//     garbage collector finds it (runtime.AddCleanup), with a warning that
//     names its key: the counterpart of a Rust guard's release on drop. Go
//     may collect a value right after its last use, so keep the Guard
//     reachable for as long as the lock is needed; defer g.Unlock(ctx)
//     does. A Done channel taken earlier still closes when it is released.
package ashlock
