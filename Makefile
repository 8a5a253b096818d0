# fenced — see README.md. Targets: demo, test, build, package.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0-dev)
LDFLAGS := -X github.com/fenced/fenced/daemon/api.Version=$(VERSION)
TEST_TIMEOUT ?= 25m
DIST    ?= dist

.PHONY: all build demo test test-deps unit package clean

all: build

build:
	mkdir -p bin
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/fenced ./cmd/fenced
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/fencectl ./cmd/fencectl

# A local 3-node cluster with simulated BMCs: elect, pause the primary, fence
# it, fail over with a higher epoch. No root needed.
demo: build
	./bin/fenced demo --bin ./bin

# Installs the simulators the tests drive (Debian packages) when missing,
# then runs every test, integration included.
# The multi-process cluster tests (./daemon) run on their own, after the
# rest, so CPU-heavy package tests do not skew their timing on small CI
# machines.
test: test-deps
	$(GO) vet ./...
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v '/daemon$$')
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./daemon

test-deps:
	./.ci/install-deps

unit:
	$(GO) test -count=1 -short ./...

# Deterministic simulation of the tenure rules (daemon/tenure/sim): SEEDS
# schedules from seed SEED (random unless given; printed). `make test` runs
# the CI profile: 10,000 schedules from seed 1. A failure prints its
# shortest schedule and the command that replays it.
SEEDS ?= 100000
SEED  ?= random
.PHONY: sim
sim:
	$(GO) test -count=1 -timeout 0 -run 'TestSimulation$$' -v ./daemon/tenure/sim -sim.seeds=$(SEEDS) -sim.base=$(SEED)

# .deb and .rpm into $(DIST) (nfpm through the Go module proxy).
package:
	./packaging/build.sh $(VERSION) $(DIST)

clean:
	rm -rf bin dist
