// Package chaos holds ashlock's chaos tests: lock holders, some in this
// process and some in child processes, run workloads under one lock on a
// three-member embedded etcd cluster while faults are injected on a
// schedule drawn from a printed seed - leader kills, member partitions,
// client blackholes and delays, lease revocations and SIGSTOP pauses of
// holder processes. Every operation is recorded on this process's
// monotonic clock and checked afterwards: the histories of a register kept
// in etcd and of a fenced external resource against a fenced-register
// model (github.com/anishathalye/porcupine), acknowledged updates against
// the stores' own records, and the holders' validity intervals against a
// strict mutex model.
//
// See RELIABILITY.md at the repository root for how to run, replay and
// soak the suite, and for the results of the runs made so far. The package
// has no non-test code; this file only carries its documentation.
package chaos
