// Package packaging builds the fenced .deb and .rpm: build.sh (what `make
// package` runs) compiles pure Go, position-independent, stripped binaries,
// has them generate their own man pages and shell completions (`gen-docs`),
// generates fenced.yaml(5) (cmd/internal/docgen/fencedyaml), the copyright
// files and the rpm's License from the binaries' build information
// (./copyright) and the changelog from the version, and assembles both
// packages with nfpm from nfpm.yaml; fenced.service is the systemd unit,
// lintian-overrides and fenced.rpmlintrc justify what the distributions'
// checkers flag. The package holds no Go code of its own, only the tests that
// build, inspect, lint, install and remove the packages.
package packaging
