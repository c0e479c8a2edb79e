# One command runs every test of both modules against real servers the
# tests start themselves: an embedded etcd, and PostgreSQL and redis-server
# from the system's binaries (scripts/ensure-servers installs the Debian
# packages first when they are missing).
#
#   make test               all tests, race detector on
#   make quickstart         the in-process quickstart
#   make lint               gofmt, go vet, staticcheck on both modules
#   make bench              benchmarks (see BENCHMARKS.md)
#   make bench-uncontended  only the uncontended etcd comparisons (two ways,
#                           in 20 + 40 processes, about 14 minutes)
#   make bench-redis        the Redis comparisons (tests/redisbench, a few
#                           minutes; BENCHMARKS.md, "Redis")
#   make bench-postgres     the PostgreSQL benchmarks (about 20 minutes)

GO          ?= go
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
TESTFLAGS   ?= -race -count=1 -timeout 15m

.PHONY: test quickstart lint bench bench-uncontended bench-redis bench-postgres

test:
	./scripts/ensure-servers
	$(GO) test $(TESTFLAGS) ./...
	cd tests && $(GO) test $(TESTFLAGS) ./...

quickstart:
	$(GO) run ./examples/quickstart

lint:
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || (echo "gofmt: files above need formatting" && exit 1)
	$(GO) vet ./...
	cd tests && $(GO) vet ./...
	$(STATICCHECK) ./...
	cd tests && $(STATICCHECK) ./...

BENCHSTAT ?= $(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

# About 40 minutes on 2 cores; see BENCHMARKS.md for how to read it.
#
# The uncontended etcd cycle is run again with 20 samples, each from a
# process of its own: go test runs a sub-benchmark -count times in a row,
# so with -count 20 each implementation's samples would come from its own
# stretch of time, and the machine's slow and fast stretches would show up
# as differences between implementations. One process per sample puts one
# sample of every implementation in each stretch.
#
# BenchmarkUncontendedInterleaved then measures the ratios the targets are
# about in 40 processes of 10 s each, the implementations taking turns
# every 16 ms within each process: one 16-cycle turn varies by about 20 %
# on this machine, so a ratio to within 1 % takes thousands of turns.
UNCONTENDED_RUNS ?= 20
INTERLEAVED_RUNS ?= 40

bench:
	$(GO) test -run '^$$' -bench . -count 6 -timeout 30m . | tee bench-memory.txt
	cd tests && $(GO) test -run '^$$' -bench . -skip '^BenchmarkUncontended' -benchtime 2s -count 6 -timeout 60m ./bench/ | tee ../bench-etcd.txt
	$(MAKE) bench-uncontended
	$(BENCHSTAT) -col /impl bench-memory.txt
	$(BENCHSTAT) -col /impl bench-etcd.txt

bench-uncontended:
	cd tests && $(GO) test -c -o bench/bench.test ./bench/
	rm -f bench-uncontended.txt bench-interleaved.txt
	cd tests/bench && for i in $$(seq $(UNCONTENDED_RUNS)); do \
		./bench.test -test.run '^$$' -test.bench '^BenchmarkUncontended$$' -test.benchtime 2s -test.timeout 10m >> ../../bench-uncontended.txt || exit 1; \
	done
	cd tests/bench && for i in $$(seq $(INTERLEAVED_RUNS)); do \
		./bench.test -test.run '^$$' -test.bench '^BenchmarkUncontendedInterleaved$$' -test.benchtime 10s -test.timeout 10m >> ../../bench-interleaved.txt || exit 1; \
	done
	@# benchstat exits 0 on a missing file: check that there is something to read.
	test -s bench-uncontended.txt && test -s bench-interleaved.txt
	$(BENCHSTAT) -col '/impl@(ashlock etcd-mutex raw-txn+delete raw-2txns raw-2puts)' bench-uncontended.txt
	$(BENCHSTAT) bench-interleaved.txt

# The load average is printed before and after: the machine's load moves
# every figure, and the ratios of one run are what the tables compare.
bench-redis:
	./scripts/ensure-servers
	cd tests && $(GO) test -c -o redisbench/redisbench.test ./redisbench/
	cd tests/redisbench && { uptime; \
		./redisbench.test -test.run '^$$' -test.bench 'Handoff|DeleteToDone' -test.benchtime 40x -test.timeout 20m && \
		./redisbench.test -test.run '^$$' -test.bench 'Uncontended|ReaderJoin' -test.benchtime 200x -test.timeout 20m; \
		uptime; } | tee ../../bench-redis.txt
# The PostgreSQL benchmarks (BENCHMARKS.md, section "PostgreSQL"), about
# 20 minutes on 2 cores. Each benchmark runs in a process of its own,
# which starts a server of its own; within it the implementations take
# turns (see tests/pgbench), so the ratios are measured in one process.
# The load average before and after is printed: the machine may be shared.
bench-postgres:
	./scripts/ensure-servers
	cd tests && $(GO) test -c -o pgbench/pgbench.test ./pgbench/
	rm -f bench-postgres.txt
	@uptime
	cd tests/pgbench && ./pgbench.test -test.run '^$$' -test.bench '^BenchmarkUncontendedInterleaved$$' -test.benchtime 20s -test.count 5 -test.timeout 30m >> ../../bench-postgres.txt || exit 1
	cd tests/pgbench && ./pgbench.test -test.run '^$$' -test.bench '^BenchmarkHandoffInterleaved$$' -test.benchtime 90s -test.count 2 -test.timeout 60m >> ../../bench-postgres.txt || exit 1
	cd tests/pgbench && ./pgbench.test -test.run '^$$' -test.bench '^BenchmarkRevokeToDone$$' -test.benchtime 10x -test.timeout 30m >> ../../bench-postgres.txt || exit 1
	@uptime
	test -s bench-postgres.txt
	$(BENCHSTAT) bench-postgres.txt
