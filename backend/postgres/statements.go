package postgres

import "fmt"

// statements holds every SQL statement of a Backend, with its schema
// (already quoted) written in. Nothing else is ever put into SQL text:
// keys, values, owners and names are bound parameters.
type statements struct {
	grant, keepAlive, revoke string
	leaseClaims              string

	lockKeys, bumpToken, reapSkip, insert, readQueue, status string

	admit, cleanup, release, reapExpired, verify, setValue string

	readStamp, writeStamp string

	inspect, observe, observeValue, fence string
}

func newStatements(s string) statements {
	f := func(q string) string { return fmt.Sprintf(q, s) }
	return statements{
		// Leases. A TTL is a whole number of microseconds, the
		// server's resolution, rounded up.
		grant: f(`INSERT INTO %[1]s.leases (expires_at, ttl)
			VALUES (clock_timestamp() + $1::bigint * interval '1 microsecond', $1::bigint * interval '1 microsecond')
			RETURNING id`),
		// A renewal never revives a lease that has expired. It also
		// counts the lease's claims (see removeLeftBehind).
		keepAlive: f(`UPDATE %[1]s.leases SET expires_at = clock_timestamp() + ttl
			WHERE id = $1 AND expires_at > clock_timestamp()
			RETURNING (extract(epoch FROM ttl) * 1e6)::bigint,
				(SELECT count(DISTINCT c.name) FROM %[1]s.claims c WHERE c.lease_id = $1)`),
		// leaseClaims lists a lease's claims: name and keys.
		leaseClaims: f(`SELECT name, array_agg(key) FROM %[1]s.claims WHERE lease_id = $1 GROUP BY name`),
		revoke:      f(`DELETE FROM %[1]s.leases WHERE id = $1`),

		// The enqueue, sent as one batch (one implicit transaction, one
		// round trip). $1 is the claim's keys, sorted.
		//
		// lockKeys creates the keys' rows if missing and locks them, in
		// sorted order so that two enqueues never deadlock; the locks are
		// held until the batch commits, so enqueues of a key take turns
		// and its tokens are handed out in commit order.
		lockKeys: f(`INSERT INTO %[1]s.keys AS k (key, last_token)
			SELECT x, 0 FROM unnest($1::text[]) AS x ORDER BY x
			ON CONFLICT (key) DO UPDATE SET last_token = k.last_token`),
		// bumpToken takes the next token, one for every key.
		bumpToken: f(`UPDATE %[1]s.keys SET last_token =
			(SELECT greatest(max(last_token) + 1, nextval('%[1]s.tokens')) FROM %[1]s.keys WHERE key = ANY($1))
			WHERE key = ANY($1)`),
		// reapSkip deletes the expired leases of the keys' claims, but
		// not one that a fenced transaction holds (see Fence): their
		// claims still count, and a waiter's reapExpired waits for it.
		reapSkip: f(`DELETE FROM %[1]s.leases WHERE id IN (
			SELECT id FROM %[1]s.leases
			WHERE id IN (SELECT lease_id FROM %[1]s.claims WHERE key = ANY($1)) AND expires_at < clock_timestamp()
			FOR UPDATE SKIP LOCKED)`),
		// insert makes the claim's rows, with the token just taken, if
		// the lease is live and every claim queued at the keys agrees on
		// the permit count ($5). A fair request ($9) always queues; one
		// that does not queue only if the keys' queues are empty, or,
		// when the caller already found that a claim made now would
		// hold ($11, with permit $12), only if no claim was queued at
		// the keys since it read them: none has a token above the
		// newest it saw at its key ($10, one per key of $1). A claim
		// that finds every queue empty holds at once.
		insert: f(`INSERT INTO %[1]s.claims
			(key, token, lease_id, name, shared, permits, permit, admitted, owner, value, keys, acquired_at)
			SELECT k.key, k.last_token, $2, $3, $4, $5,
				CASE WHEN e.empty OR $11 THEN $12 ELSE -1 END,
				e.empty OR $11, $6, $7, $8,
				CASE WHEN e.empty OR $11 THEN clock_timestamp() END
			FROM %[1]s.keys k,
				(SELECT NOT EXISTS (SELECT 1 FROM %[1]s.claims WHERE key = ANY($1)) AS empty) e
			WHERE k.key = ANY($1)
				AND ($9 OR e.empty OR $11)
				AND ($10::bigint[] IS NULL OR NOT EXISTS (
					SELECT 1 FROM %[1]s.claims c JOIN unnest($1::text[], $10::bigint[]) AS u (k, t) ON c.key = u.k
					WHERE c.token > u.t))
				AND NOT EXISTS (SELECT 1 FROM %[1]s.claims WHERE key = ANY($1) AND permits <> $5)
				AND EXISTS (SELECT 1 FROM %[1]s.leases WHERE id = $2 AND expires_at > clock_timestamp())`),
		// readQueue reads the keys' queues, in token order, with the
		// time left on each claim's lease by the server's clock.
		readQueue: f(`SELECT c.key, c.token, c.name, c.lease_id, c.shared, c.permits, c.permit, c.admitted,
				c.acquired_at, (extract(epoch FROM l.expires_at - clock_timestamp()) * 1e6)::bigint
			FROM %[1]s.claims c JOIN %[1]s.leases l ON l.id = c.lease_id
			WHERE c.key = ANY($1) ORDER BY c.key, c.token`),
		// status: whether lease $1 is live.
		status: f(`SELECT coalesce((SELECT expires_at > clock_timestamp() FROM %[1]s.leases WHERE id = $1), false)`),

		// admit records that a waiting claim holds its keys (and, for a
		// counted claim, its permit $4), comparing on the claim's
		// identity and its lease's life. It returns one row per key.
		admit: f(`UPDATE %[1]s.claims SET admitted = true, permit = $4, acquired_at = clock_timestamp(), ver = ver + 1
			WHERE key = ANY($1) AND token = $2 AND name = $3
				AND EXISTS (SELECT 1 FROM %[1]s.leases WHERE id = $5 AND expires_at > clock_timestamp())
			RETURNING acquired_at`),
		// cleanup removes what a failed Acquire left, found by name alone
		// (its token may never have reached the client), after lockKeys in
		// the same batch (see acquisition.cleanup).
		cleanup: f(`DELETE FROM %[1]s.claims WHERE key = ANY($1) AND name = $2`),
		release: f(`DELETE FROM %[1]s.claims WHERE key = ANY($1) AND token = $2 AND name = $3`),
		// reapExpired deletes leases that have expired by the server's
		// clock; it waits for a fenced transaction that holds one.
		reapExpired: f(`DELETE FROM %[1]s.leases WHERE id = ANY($1) AND expires_at < clock_timestamp()`),
		verify:      f(`SELECT count(*) FROM %[1]s.claims WHERE key = ANY($1) AND token = $2 AND name = $3`),
		setValue: f(`UPDATE %[1]s.claims SET value = $4, ver = ver + 1
			WHERE key = ANY($1) AND token = $2 AND name = $3
				AND EXISTS (SELECT 1 FROM %[1]s.leases l WHERE l.id = lease_id AND l.expires_at > clock_timestamp())`),

		readStamp: f(`SELECT stamp_wall, stamp_logical FROM %[1]s.keys WHERE key = ANY($1)
			ORDER BY stamp_wall DESC, stamp_logical DESC LIMIT 1`),
		writeStamp: f(`WITH c AS (
				UPDATE %[1]s.claims SET stamp_wall = $4, stamp_logical = $5
				WHERE key = ANY($1) AND token = $2 AND name = $3 RETURNING key
			), k AS (
				UPDATE %[1]s.keys SET stamp_wall = $4, stamp_logical = $5
				WHERE key IN (SELECT key FROM c) AND (stamp_wall, stamp_logical) < ($4, $5)
			)
			SELECT count(*) FROM c`),

		inspect: f(`SELECT token, shared, permits, permit, admitted, keys IS NULL, owner, value, acquired_at, stamp_wall, stamp_logical
			FROM %[1]s.claims WHERE key = $1 ORDER BY token`),
		// observe reads the queues of the keys $1 as inspect does, with
		// each row's ver, and each key's newest token as of the same
		// snapshot (one row with a NULL claim for an empty queue, none
		// for a key never claimed).
		observe: f(`SELECT k.key, k.last_token, c.token, c.ver, c.shared, c.permits, c.permit, c.admitted, c.keys IS NULL,
				c.owner, c.value, c.acquired_at, c.stamp_wall, c.stamp_logical
			FROM %[1]s.keys k LEFT JOIN %[1]s.claims c ON c.key = k.key
			WHERE k.key = ANY($1) ORDER BY k.key, c.token`),
		// observeValue reads the value of one version of a claim's row.
		observeValue: f(`SELECT value FROM %[1]s.claims WHERE key = $1 AND token = $2 AND ver = $3`),
		// fence: see Backend.Fence.
		fence: f(`SELECT 1 FROM %[1]s.claims c JOIN %[1]s.leases l ON l.id = c.lease_id
			WHERE c.key = $1 AND c.token = $2 AND c.admitted AND l.expires_at > clock_timestamp()
			FOR KEY SHARE OF c, l`),
	}
}
