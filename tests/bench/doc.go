// Package bench holds ashlock's etcd benchmarks. It has no API: everything
// is in its _test.go files, and `go test` without -bench runs only a few
// cheap checks of the benchmarks' own helpers and TestLockAllNoDeadlock, a
// 3 s run of contended LockAll against the etcd child (longer with
// ASHLOCK_DEADLOCK_RUN=60s).
//
// Every benchmark measures ashlock beside its peers and a floor in the same
// run, on the same embedded etcd member: etcd's own concurrency.Mutex (with
// its Session reused), a naive put-if-absent-and-watch lock where it shows
// what waiting in a queue buys, and raw etcd requests that do the least any
// lock must do. Sub-benchmarks are named impl=NAME so that benchstat can put
// them in columns:
//
//	cd tests && go test -run '^$' -bench . -count 6 ./bench/ | tee bench-etcd.txt
//	go run golang.org/x/perf/cmd/benchstat@latest -col /impl bench-etcd.txt
//
// The etcd member runs in a child process (this test binary started again
// with ASHLOCK_BENCH_ETCD=serve), so that heap, goroutine and CPU figures of
// the benchmark process are the clients' alone and a CPU profile
// (-cpuprofile) shows the client side only. Requests are counted by a gRPC
// client interceptor on every etcd client a benchmark makes, and reported
// with b.ReportMetric. The results and how to read them are in
// BENCHMARKS.md at the repository root.
package bench
