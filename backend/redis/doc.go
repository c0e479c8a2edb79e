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
// # Releases, joins and the disk
//
// A release that leaves its keys free, of a claim the Backend named, is
// answered without waiting for the append-only file: it grants nothing,
// and the claim's lease's next renewal removes the claim again should a
// crash or failover bring it back (see removeLeftBehind). The next script
// run that writes to the file (an acquisition, a renewal, any other
// release) writes it first, so a crash undoes only the releases answered since the
// last such write. A release with a claim queued behind it hands the key
// over and is written before it is answered. So is every other change but
// one: the join of a claim that the rule admits only with nothing ahead
// (a plain lock's waiter), which holds nothing until a claim ahead departs
// and is written by that departure's run first (a crash before then loses
// it, and its waiter joins again); such a join writes nothing to the file,
// so neither does it write what was noted before it.
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
// confirmed). An exclusive waiter on one key whose claim the Backend named
// (a plain lock's) subscribes to none: every removal of a claim also tells
// the claim just behind it, on the channel of the Backend that named it,
// {prefix}b:<name base>, subscribed from New on (see registry.direct), and
// that claim is the one such a waiter waits for. A waiter also wakes at
// the end of the leases of the claims it waits for (a
// timer from the server's PTTL: an expired lease is reaped by the next
// read of its keys), never by polling. After the subscription is
// restored, each waiter reads its queue again. The
// Backend also subscribes to the keyspace notifications of its leases: a
// lease deleted or expired reaches its holders' OnLost at once. Those
// notifications need notify-keyspace-events to include K, g and x (and e,
// where a server short of memory may evict leases); New warns when K, g or
// x is missing, and a deleted lease is then found by its holders' next
// renewal.
//
// # Handoff
//
// A plain claim (exclusive or shared, one key, no stamp) is recorded as
// admitted when it joins its queue, since only the claims ahead keep it
// from holding. When the claim just ahead of it leaves from the head of
// the queue, the departure says so, with the server's clock: nothing is
// ahead of the claim from then on (claims only join at the back), and it
// holds on hearing it, without a request of its own; the release ahead is
// the handoff's only request on the way. After any other wake-up it reads
// its queue (a script that writes nothing, so it waits for no fsync of its
// own) and holds as soon as the rule finds it free. The time it came to
// hold, the server's clock at that release or read and Claim.AcquiredAt,
// is written after Acquire has returned, compared on the claim's identity
// (so it changes nothing once the claim has gone). Until that write lands,
// and for good if it fails, Inspect and Observe show such a holder with
// the time it joined the queue as its AcquiredAt. Counted, multi-key and
// stamped claims record their admission (permit, stamp) in a script run
// before Acquire returns.
//
// A claim that holds on hearing the release has not read its own claim:
// its presence rests on its lease, which alone removes it (besides its own
// release). A lease the server let expire is past the client's own
// deadline for it too, so the client refuses the guard's token; a lease
// deleted is heard on the same connection before any later release. So a
// Backend made while keyspace notifications were off takes no handoff on
// hearing it, nor does a waiter whose subscriber's stream broke since its
// last read (the deletion may have been lost in the gap): they read their
// queues, which finds such a claim gone.
//
// A claim that joins lists only the claims ahead of it that package
// backend's Ahead names (for an exclusive claim, the one just ahead), and
// reaps ended leases among those alone, so joining does not grow with the
// queue; waiters' reads reap the rest.
package redis
