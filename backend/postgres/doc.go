// Package postgres is an ashlock backend that keeps lock claims in
// PostgreSQL, for services that already run it: the lock and the resource
// it protects can live in one database, so that a write commits only
// while its lock is held (Fence).
//
// Create one with New from a pgxpool.Pool you configure and own, and pass
// it to ashlock.ConnectWith; or import this package and let ashlock.Connect
// open a "postgres://..." seed (see ParseSeed).
//
// # Tables
//
// Everything lives in one schema (WithSchema, default "ashlock"), created
// by New if missing:
//
//	leases (id bigint PRIMARY KEY, expires_at timestamptz, ttl interval)
//	claims (key text, token bigint, lease_id bigint REFERENCES leases ON DELETE CASCADE,
//	        name, shared, permits, permit, admitted, owner, value, keys, acquired_at,
//	        stamp_wall, stamp_logical, PRIMARY KEY (key, token))
//	keys   (key text PRIMARY KEY, last_token bigint, stamp_wall, stamp_logical)
//	tokens (a sequence)
//
// A claim is a row per key (a multi-key claim has one at each of its keys,
// all with one token). An operator may look and intervene:
//
//	SELECT * FROM ashlock.claims WHERE key = 'orders/42' ORDER BY token;
//	DELETE FROM ashlock.claims WHERE key = 'orders/42' AND token = 17;  -- ends that claim
//	DELETE FROM ashlock.leases WHERE id = 5;                            -- revokes a lease
//
// Either delete reaches the holder's OnLost through the listener at once.
//
// # Tokens
//
// The claim's token is its fencing token. Enqueues of a key lock the key's
// row in keys, so they take turns, and take last_token + 1 (or the next
// value of the sequence, if higher); a multi-key claim locks its keys'
// rows in sorted order and takes one more than the highest of them. The
// row lock hands tokens out in commit order (nextval alone would not), so
// a claim never appears in a queue behind one with a higher token, and the
// tokens are stored and logged like any row: they survive restarts and
// crash recovery.
//
// # Time
//
// Lease expiry is judged by the server's clock alone (clock_timestamp(),
// not the client's and not now(), which is the transaction's start). A
// renewal sets expires_at from the server's clock, only while the lease
// has not expired, so it never revives one. A claim counts until its row
// is deleted: a lease that has expired is deleted (and its claims with
// it, by cascade) by the first enqueue or Inspect of one of its keys, or
// by a waiter behind one of its claims, whose timer is set from the
// server's expires_at; every read that decides admission counts the
// claims of an expired lease that is still there.
//
// # Protocol
//
// Package backend's rules decide everything: this package reads queues
// and applies backend.FreePrefix, backend.WaitFor and backend.PermitFor to
// them, and lists holders with backend.Describe. The statements are in
// statements.go:
//
//   - Enqueue: one batch, one implicit transaction, one round trip: lock
//     the keys' rows and take a token, delete expired leases of the keys'
//     claims, insert the claim (if its lease is live and its permit count
//     agrees with every claim queued at its keys; holding at once if every
//     queue is empty), read the queues back.
//   - Admission of a waiter: one UPDATE that compares on the claim's own
//     rows and its lease's life, recording its permit.
//   - Release: one DELETE that compares on key, token and name; a failed
//     Acquire deletes its rows by name, after locking its keys' rows so
//     that an enqueue of its own still waiting for them commits first,
//     so a lost reply leaves nothing. An enqueue that reaches the
//     server only after that delete, held up in the network, inserts its
//     claim after all; the lease's next renewal finds it (see below).
//   - Renewal: one UPDATE per lease, however many claims it holds, which
//     also counts the lease's claims. When they are more than this
//     Backend has under way on the lease, it lists them and deletes
//     those it named itself and no longer has under way: a claim nobody
//     holds, which would otherwise come to hold its key until its lease
//     ended. A claim is under way from before its enqueue is sent until
//     its rows are known to be gone. Claims whose AcquireRequest.ID the
//     caller chose are left to their lease, since the lease may carry
//     another Backend's. (The root package lets the Backend name every
//     claim: backend.ClaimNamer.)
//
// # Events
//
// Triggers on claims notify the channel "ashlock:<schema>" of each insert,
// admission and value change, with the row, and of each statement's
// deletes (cascaded ones included), with the key and tokens. Each Backend has one listener connection besides the
// pool, whatever the number of locks held or awaited. A waiter wakes only
// for the events of the claims the rule says it waits for (a release
// wakes the next waiter, a writer's release the readers behind it), or at
// the expiry of such a claim's lease; it never polls. A holder's claim
// deleted by anyone but its own Release reaches OnLost. When the listener
// connection drops it reconnects; every waiter then reads its queues
// again and every holder's claim is checked once. A listener connection
// silent for WithListenerPing's interval gets a round trip, and one that
// does not answer in time is taken as dropped, so a connection that dies
// without a reset is not left to TCP keepalive. An Observe follows its
// key's notifications change by change (see observe.go); after a
// reconnection it reads the queue again once.
//
// # Connections
//
// The pool may go through a pooler in transaction mode (PgBouncer): every
// statement is a single statement or one batch, and no transaction stays
// open between round trips (prepared statements need the pooler's support
// for them, or pgx.QueryExecModeExec). The listener needs a session: give
// it a connection config of its own with WithListenConfig, pointing at
// the server or at a session-mode pool.
package postgres
