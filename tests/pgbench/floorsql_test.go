package pgbench_test

import "fmt"

// floorSQL holds the statements backend/postgres sends for an exclusive
// lock, copied verbatim from its statements.go (a change there must be
// copied here, or the floor measures another protocol): the enqueue
// batch, the waiter's read and admission, and the release. %[1]s is the
// schema.
type floorSQL struct {
	grant, lockKeys, bumpToken, reapSkip, insert, readQueue, status, admit, release string
}

func newFloorSQL(schema string) floorSQL {
	f := func(q string) string { return fmt.Sprintf(q, schema) }
	return floorSQL{
		grant: f(`INSERT INTO %[1]s.leases (expires_at, ttl)
			VALUES (clock_timestamp() + $1::bigint * interval '1 microsecond', $1::bigint * interval '1 microsecond')
			RETURNING id`),
		lockKeys: f(`INSERT INTO %[1]s.keys AS k (key, last_token)
			SELECT x, 0 FROM unnest($1::text[]) AS x ORDER BY x
			ON CONFLICT (key) DO UPDATE SET last_token = k.last_token`),
		bumpToken: f(`UPDATE %[1]s.keys SET last_token =
			(SELECT greatest(max(last_token) + 1, nextval('%[1]s.tokens')) FROM %[1]s.keys WHERE key = ANY($1))
			WHERE key = ANY($1)`),
		reapSkip: f(`DELETE FROM %[1]s.leases WHERE id IN (
			SELECT id FROM %[1]s.leases
			WHERE id IN (SELECT lease_id FROM %[1]s.claims WHERE key = ANY($1)) AND expires_at < clock_timestamp()
			FOR UPDATE SKIP LOCKED)`),
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
		readQueue: f(`SELECT c.key, c.token, c.name, c.lease_id, c.shared, c.permits, c.permit, c.admitted,
				c.acquired_at, (extract(epoch FROM l.expires_at - clock_timestamp()) * 1e6)::bigint
			FROM %[1]s.claims c JOIN %[1]s.leases l ON l.id = c.lease_id
			WHERE c.key = ANY($1) ORDER BY c.key, c.token`),
		status: f(`SELECT coalesce((SELECT expires_at > clock_timestamp() FROM %[1]s.leases WHERE id = $1), false)`),
		admit: f(`UPDATE %[1]s.claims SET admitted = true, permit = $4, acquired_at = clock_timestamp(), ver = ver + 1
			WHERE key = ANY($1) AND token = $2 AND name = $3
				AND EXISTS (SELECT 1 FROM %[1]s.leases WHERE id = $5 AND expires_at > clock_timestamp())
			RETURNING acquired_at`),
		release: f(`DELETE FROM %[1]s.claims WHERE key = ANY($1) AND token = $2 AND name = $3`),
	}
}
