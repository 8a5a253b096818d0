#!/usr/bin/env bash
# Builds dist/fenced_*.deb and dist/fenced-*.rpm (what `make package` runs).
#   packaging/build.sh [VERSION [DIST]]
# VERSION (default: git describe) is stamped into the binaries as is and
# turned into a dpkg/rpm version by pkgversion.sh; DIST defaults to dist/.
# Needs Go and the Go module proxy: nfpm is fetched and run at a pinned
# version through `go run` (cached after the first build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
version=${1:-$(git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo 0.1.0-dev)}
dist=${2:-$repo/dist}
GO=${GO:-go}
NFPM=${NFPM:-github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2}

mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
# Reproducible dates (man page footers, archive mtimes): the commit's time.
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH
PKG_VERSION=$("$here/pkgversion.sh" "$version")
PKG_RELEASE=${PKG_RELEASE:-1}
PKG_ARCH=$("$GO" env GOARCH)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
export PKG_VERSION PKG_RELEASE PKG_ARCH STAGE

# Static binaries: the package then runs on any glibc (or none).
ldflags="-X github.com/fenced/fenced/daemon/api.Version=$version"
for cmd in fenced fencectl; do
  (cd "$repo" && CGO_ENABLED=0 "$GO" build -ldflags "$ldflags" -o "$STAGE/bin/$cmd" "./cmd/$cmd")
  # The shipped binary documents itself: pages and completions match it.
  "$STAGE/bin/$cmd" gen-docs --man "$STAGE/man" --completions "$STAGE/completions"
done
gzip -9n "$STAGE"/man/*.1

# One build per DIST: older fenced packages there are replaced.
rm -f "$dist"/fenced_*.deb "$dist"/fenced-*.rpm
for packager in deb rpm; do
  (cd "$here" && "$GO" run "$NFPM" package --config nfpm.yaml --packager "$packager" --target "$dist/")
done
ls "$dist"/fenced_*.deb "$dist"/fenced-*.rpm
