// Package chaos holds ashlock's chaos tests: lock holders, some in this
// process and some in child processes, run workloads on a store while
// faults are injected on a schedule drawn from a printed seed. The store
// is a three-member embedded etcd cluster (TestChaos: leader kills, member
// partitions, client blackholes and delays), a PostgreSQL server
// (TestChaosPostgres: immediate shutdowns and restarts, SIGSTOP of the
// server, pg_terminate_backend of a holder's connections, client
// blackholes) or a Redis server (TestChaosRedis: SIGKILL and restarts
// from its append-only file, SIGSTOP of the server, CLIENT KILL of a
// holder's connections, client blackholes); with any of them, leases are
// revoked as an operator would and holder processes are paused with
// SIGSTOP. A store is one file (store_etcd_test.go, store_pg_test.go,
// store_redis_test.go; see store_test.go for what it supplies). There are
// four workloads, side by side under the same faults: a mutex guarding a
// register in the store (written in a Txn guarded by the claim's
// ownership on etcd, in a transaction that passed the Backend's Fence on
// PostgreSQL, by a script that checks the claim first on Redis) and a
// fenced resource; a counted lock of three permits guarding one fenced
// register per permit; transfers between fenced accounts, each taken with
// LockAll on the accounts it touches; and an election, whose candidates
// run Election.Run in child processes and write to a fenced register with
// their term while they lead, watched by Election.Observe in this
// process. Every operation is
// recorded on this process's monotonic clock and checked afterwards:
// every register's history against a fenced-register model
// (github.com/anishathalye/porcupine), acknowledged updates against the
// stores' own records, the accounts' total, the holders' validity
// intervals against a strict mutex model (per permit and per account for
// the counted and multi-key locks), the leaders' belief - lead's context
// alive, probed on this process's clock - against the same model over the
// terms, and the observed leaders against the terms that led.
//
// See RELIABILITY.md at the repository root for how to run, replay and
// soak the suite, and for the results of the runs made so far. The package
// has no non-test code; this file only carries its documentation.
package chaos
