// Package redis keeps ashlock's locks in Redis (7 or later), through
// github.com/redis/go-redis/v9: exclusive, shared, counted and multi-key
// locks with fencing tokens, values and elections, with the same
// guarantees as the other backends. Importing it registers the seeds
// redis:// and rediss:// (see ParseSeed) with package backend, so that
// ashlock.Connect opens them.
//
// # Storage
//
// Every state change is one Lua script run, atomic on the server: adding a
// claim with its token, recording its admission, releasing it, renewing a
// lease, reaping the claims of an ended lease. The scripts store and
// compare; which claims hold a key is decided in Go, by package backend's
// rules, from the queue a script returns. All keys of a Backend start with
// the hash tag "{prefix}", so Redis Cluster serves them from one slot (see
// layout for the names). A lease is the key {prefix}lease:<id>, expiring
// with it; DEL of it revokes the lease and ends every claim bound to it.
//
// # Tokens
//
// Fencing tokens come from one counter per prefix, {prefix}token, which
// the script run that adds a claim advances once: each new value is the
// larger of the last one plus one and the server's clock in microseconds
// (TIME). Tokens therefore increase strictly and are never reused while
// the counter survives, and even a server that lost the counter (a failover to a
// replica that had not received the last writes, a restart without
// persistence) issues tokens above every earlier one unless its clock is
// behind the old server's by more than the time between the last token
// issued there and the first issued here. Lease ids follow the same rule,
// so that a client renewing a lease the server lost never renews another
// client's lease granted since under the same id. Both stay below 2^53
// (exact in Lua's numbers) until the year 2255.
//
// # Waiting and loss
//
// A Backend has one Pub/Sub connection. Scripts publish each admission and
// departure of a claim on the claim's channel, {prefix}e:<token>, and
// every change at a key, with what changed, on the key's channel,
// {prefix}k:<key> (see scripts.go). An Observe follows the key's queue
// from those messages alone after one read, which marks its place among
// them with a message of its own (see observe.go). A Backend subscribes only to the channels of the
// claims its waiters wait for (package backend's WaitFor), so a release reaches
// only the Backends it can admit, and to the channels of the keys its
// Observes watch (see subs.go for how a subscription made after a read is
// confirmed). A waiter also wakes at the end of those claims' leases (a
// timer from the server's PTTL: an expired lease is reaped by the next
// read of its keys), never by polling. After the subscription is
// restored, each waiter reads its queue again. The
// Backend also subscribes to the keyspace notifications of its leases: a
// lease deleted or expired reaches its holders' OnLost at once. Those
// notifications need notify-keyspace-events to include K, g and x; New
// warns when they do not, and a deleted lease is then found by its
// holders' next renewal.
package redis
