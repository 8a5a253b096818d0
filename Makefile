# fenced — see README.md. Targets: demo, test (quick), check (what CI runs), build, package.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0-dev)
LDFLAGS := -X github.com/fenced/fenced/daemon/api.Version=$(VERSION)
TEST_TIMEOUT ?= 25m
DIST    ?= dist

.PHONY: all build demo test check test-deps lint race unit fuzz-smoke package clean sim nemesis

all: build

build:
	mkdir -p bin
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/fenced ./cmd/fenced
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/fencectl ./cmd/fencectl
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/fenced-lab ./cmd/fenced-lab

# A local 3-node cluster with simulated BMCs: elect, pause the primary, fence
# it, fail over with a higher epoch. No root needed.
demo: build
	./bin/fenced-lab demo --bin ./bin

# The quick check, for a change before it is pushed (about 4 minutes on 2
# cores): installs what the tests drive (Debian packages) when missing,
# lint, the tests of every package but the cluster suites and the package
# build, with the simulator's 2,000 schedules (FENCED_TEST_QUICK), and the
# race detector on the core.
test: test-deps lint
	FENCED_TEST_QUICK=1 $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v -e '/daemon$$' -e '/harness/nemesis$$' -e '/packaging$$')
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(RACE_QUICK)

# Everything CI runs (.ci/run): every test, the simulator's 10,000
# schedules and its negative controls, the packages, the race detector on
# every package that runs its concurrency in the test process, the fuzz
# smoke, then the multi-process cluster suite (./daemon) and the nemesis
# profiles side by side (.ci/cluster-suites), after the rest, so CPU-heavy
# package tests do not skew their timing on small CI machines.
check: test-deps lint
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v -e '/daemon$$' -e '/harness/nemesis$$')
	$(MAKE) race
	$(MAKE) fuzz-smoke
	GO=$(GO) TEST_TIMEOUT=$(TEST_TIMEOUT) ./.ci/cluster-suites

# The nemesis (see README, "How safety is tested"): random faults against
# real processes on simulated machines with a shared ext4, then the checker.
# Root. Default timing (lease 3s); TIMING=ci for the CI profile (lease 1.5s).
# PROFILE=tokens: storage that checks tokens, one node without a fence
# topology (takeovers from it by lease expiry).
FAULTS  ?= 1000
NODES   ?= 5
TIMING  ?= default
PROFILE ?= fence
nemesis: build
	$(GO) build -o bin/nemesis ./harness/nemesis/cmd/nemesis
	./bin/nemesis run --nodes $(NODES) --faults $(FAULTS) --seed $(or $(SEED),0) --timing $(TIMING) --profile $(PROFILE) \
		--fenced bin/fenced --fencectl bin/fencectl --lab bin/fenced-lab $(if $(DIR),--dir $(DIR))

# go vet and staticcheck (pinned; fetched through the module proxy), both
# also with the test-only fault injection compiled in.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) vet ./...
	$(GO) vet -tags faultinject ./daemon
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags faultinject ./daemon

# The race detector on the packages whose tests run their concurrency in
# the test process (the cluster tests in ./daemon run fenced as separate
# processes, and are timing-sensitive: they run without it).
RACE_PKGS ?= ./daemon/tenure ./daemon/driver ./daemon/api ./daemon/config ./daemon/health ./daemon/unfence ./daemon/storage/... ./quorum ./stonith
# The agents with -short: their own concurrency (sessions, keep-alives,
# retries) without the long runs against external simulators and agents,
# which the plain run covers.
RACE_SHORT ?= ./agents/...
# make test's: the core, whose concurrency is the daemon's own.
RACE_QUICK ?= ./daemon/tenure ./daemon/driver ./daemon/api ./daemon/config ./daemon/unfence ./stonith
race:
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(RACE_PKGS)
	$(GO) test -race -short -count=1 -timeout $(TEST_TIMEOUT) $(RACE_SHORT)

test-deps:
	./.ci/install-deps

unit:
	$(GO) test -count=1 -short ./...

# Every fuzz target of the repository for a short time each (FUZZTIME,
# shortened so that all of them fuzz for FUZZBUDGET seconds at most);
# .ci/fuzz-smoke finds them with `go test -list`.
FUZZTIME   ?= 10s
FUZZBUDGET ?= 60
fuzz-smoke:
	GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZBUDGET=$(FUZZBUDGET) ./.ci/fuzz-smoke

# Deterministic simulation of the tenure rules (daemon/tenure/sim): SEEDS
# schedules from seed SEED (random unless given; printed). `make check`
# runs the CI profile: 10,000 schedules from seed 1 (`make test`: 2,000). A failure prints its
# shortest schedule and the command that replays it.
SEEDS ?= 100000
sim:
	$(GO) test -count=1 -timeout 0 -run 'TestSimulation$$' -v ./daemon/tenure/sim -sim.seeds=$(SEEDS) -sim.base=$(or $(SEED),random)

# Failover benchmarks (issue 14): takeovers with fast, slow (300ms, 2.5s
# each way), dead-then-recovered and dead-first-level BMCs, fences through
# slow IPMI and Redfish BMCs, idle cost and the no-false-failover soaks;
# p50/p99 and the phase split of each, then a summary. Measures, asserts
# nothing about time; about an hour; not part of `make test`. See .ci/bench
# for the knobs (BENCH_RUNS, BENCH_SLOW_RUNS, FENCED_SOAK_SECONDS ...).
.PHONY: bench
bench: test-deps
	GO=$(GO) ./.ci/bench

# .deb and .rpm into $(DIST) (nfpm through the Go module proxy).
package:
	./packaging/build.sh $(VERSION) $(DIST)

clean:
	rm -rf bin dist
