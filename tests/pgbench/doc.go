// Package pgbench holds ashlock's PostgreSQL benchmarks. It has no API:
// everything is in its _test.go files, which hold benchmark functions and
// TestMain only, so that `go test` without -bench runs nothing and starts
// no server.
//
// With -bench, TestMain starts one PostgreSQL server (tests/pgtest) for
// the run. Every benchmark measures ashlock on backend/postgres beside
// the floor, the very statements the backend sends, sent by hand with
// plain pgx, and beside PostgreSQL's advisory locks, in one process,
// taking turns (see benchrun.Interleave and interleaveHandoffs) so that
// the shared machine's slow and fast stretches fall on every
// implementation alike.
// Each implementation works in a database of its own: PostgreSQL signals
// every listening connection of a database on each NOTIFY, so one
// implementation's listeners would otherwise be woken by another's
// events.
//
//	make bench-postgres   # from the repository root: the runs of BENCHMARKS.md
//	cd tests && go test -run '^$' -bench . -benchtime 10s -timeout 60m ./pgbench/
//
// Statements are counted by a pgx tracer on every connection a benchmark
// makes (a batch counts its statements one by one, and once as a round
// trip) and reported with b.ReportMetric; lease renewals are counted
// apart. The results and how to read them are in BENCHMARKS.md at the
// repository root, section "PostgreSQL".
package pgbench
