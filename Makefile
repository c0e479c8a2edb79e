# One command runs every test of both modules, the etcd ones included: the
# tests start an embedded etcd themselves, so nothing needs installing.
#
#   make test        all tests, race detector on
#   make quickstart  the in-process quickstart
#   make lint        gofmt, go vet, staticcheck on both modules
#   make bench       benchmarks (see BENCHMARKS.md)

GO          ?= go
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
TESTFLAGS   ?= -race -count=1 -timeout 15m

.PHONY: test quickstart lint bench

test:
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

# About 25 minutes on 2 cores; see BENCHMARKS.md for how to read it. The
# uncontended etcd cycle is run again with 20 samples: with 6 its peers'
# spread is too wide to tell ratios near 1.0 apart.
bench:
	$(GO) test -run '^$$' -bench . -count 6 -timeout 30m . | tee bench-memory.txt
	cd tests && $(GO) test -run '^$$' -bench . -benchtime 2s -count 6 -timeout 60m ./bench/ | tee ../bench-etcd.txt
	cd tests && $(GO) test -run '^$$' -bench Uncontended -benchtime 2s -count 20 -timeout 30m ./bench/ | tee ../bench-uncontended.txt
	$(BENCHSTAT) -col /impl bench-memory.txt
	$(BENCHSTAT) -col /impl bench-etcd.txt
	$(BENCHSTAT) -col /impl bench-uncontended.txt
