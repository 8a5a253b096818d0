# fenced — see README.md. Targets: demo, test, build, package.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0-dev)
LDFLAGS := -X github.com/fenced/fenced/daemon.Version=$(VERSION)
TEST_TIMEOUT ?= 25m
DIST    ?= dist

.PHONY: all build demo test test-deps unit package clean nemesis

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
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v -e '/daemon$$' -e '/harness/nemesis$$')
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./daemon
	$(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) ./harness/nemesis

# The nemesis (see README, "How safety is tested"): random faults against
# real processes on simulated machines with a shared ext4, then the checker.
# Root. Default timing (lease 3s); TIMING=ci for the CI profile (lease 1.5s).
FAULTS ?= 1000
NODES  ?= 5
SEED   ?= 0
TIMING ?= default
nemesis: build
	$(GO) build -o bin/nemesis ./harness/nemesis/cmd/nemesis
	./bin/nemesis run --nodes $(NODES) --faults $(FAULTS) --seed $(SEED) --timing $(TIMING) \
		--fenced bin/fenced --fencectl bin/fencectl $(if $(DIR),--dir $(DIR))

test-deps:
	./.ci/install-deps

unit:
	$(GO) test -count=1 -short ./...

# .deb and .rpm into $(DIST) (nfpm through the Go module proxy).
package:
	./packaging/build.sh $(VERSION) $(DIST)

clean:
	rm -rf bin dist
