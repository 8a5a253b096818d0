// Package packaging builds the fenced .deb and .rpm: build.sh (what `make
// package` runs) compiles static binaries, has them generate their own man
// pages and shell completions (`gen-docs`), and assembles both packages with
// nfpm from nfpm.yaml; fenced.service is the systemd unit. The package holds
// no Go code of its own, only the tests that build, inspect, install and
// remove the packages.
package packaging
