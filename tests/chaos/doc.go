// Package chaos holds ashlock's chaos tests: lock holders, some in this
// process and some in child processes, run workloads on a three-member
// embedded etcd cluster while faults are injected on a schedule drawn from
// a printed seed - leader kills, member partitions, client blackholes and
// delays, lease revocations and SIGSTOP pauses of holder processes. There
// are four workloads, side by side under the same faults: a mutex
// guarding a register in etcd and a fenced resource; a counted lock of
// three permits guarding one fenced register per permit; transfers
// between fenced accounts, each taken with LockAll on the accounts it
// touches; and an election, whose candidates run Election.Run in child
// processes and write to a fenced register with their term while they
// lead, watched by Election.Observe in this process. Every operation is
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
