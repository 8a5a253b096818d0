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
# The generators run below call the go command themselves (go list, go mod
# download): the same toolchain as $GO.
PATH="$("$GO" env GOROOT)/bin:$PATH"
export PATH

# What nfpm.yaml says about the package, for the files generated here.
meta() { sed -n "s/^$1: //p" "$here/nfpm.yaml"; }
MAINTAINER=$(meta maintainer)
HOMEPAGE=$(meta homepage)
VENDOR=$(meta vendor)
if [[ -z $MAINTAINER || -z $HOMEPAGE || -z $VENDOR ]]; then
  echo "build.sh: nfpm.yaml lacks maintainer, homepage or vendor" >&2
  exit 1
fi
# build.sh appends to the contents list: it must be the last key.
if [[ $(grep -E '^[a-z_]+:' "$here/nfpm.yaml" | tail -1) != contents:* ]]; then
  echo "build.sh: contents must be the last key of nfpm.yaml (entries are appended to it)" >&2
  exit 1
fi

# Pure Go (CGO_ENABLED=0): no shared library to depend on, the same binary
# on any glibc. Position-independent (-buildmode=pie, as Debian's and
# Fedora's Go packaging build), so ASLR moves the daemon's code too; that
# needs only the system's dynamic loader. Stripped (-s -w: no symbol table,
# no DWARF); the build information the copyright file is made from stays.
ldflags="-s -w -X github.com/fenced/fenced/daemon/api.Version=$version"
for cmd in fenced fencectl; do
  (cd "$repo" && CGO_ENABLED=0 "$GO" build -buildmode=pie -ldflags "$ldflags" -o "$STAGE/bin/$cmd" "./cmd/$cmd")
  # The shipped binary documents itself: pages and completions match it.
  "$STAGE/bin/$cmd" gen-docs --man "$STAGE/man" --completions "$STAGE/completions"
done
# fenced.yaml(5) from daemon/config's types, defaults and doc comments.
(cd "$repo" && "$GO" run ./cmd/internal/docgen/fencedyaml --version "$version" --out "$STAGE/man")
gzip -9n "$STAGE"/man/*.[0-9]

# Copyright files and the rpm's License from the binaries' build information:
# every module linked in, with its license.
(cd "$repo" && "$GO" run ./packaging/copyright --name fenced --contact "$MAINTAINER" \
  --source "$HOMEPAGE" --copyright "$VENDOR" --license LICENSE \
  --deb "$STAGE/copyright" --full "$STAGE/copyright.full" --spdx "$STAGE/license.spdx" \
  /usr/sbin/fenced="$STAGE/bin/fenced" /usr/bin/fencectl="$STAGE/bin/fencectl")

# The changelog (Debian's changelog.Debian.gz, the rpm's %changelog): one
# entry for this build, dated SOURCE_DATE_EPOCH.
cat >"$STAGE/changelog.yml" <<YAML
- semver: "$PKG_VERSION-$PKG_RELEASE"
  date: $(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
  packager: "$MAINTAINER"
  deb:
    urgency: medium
    distributions: [unstable]
  changes:
    - note: "Package of fenced $version."
YAML

# The generated rest of the nfpm configuration.
{
  cat "$here/nfpm.yaml"
  for page in "$STAGE"/man/*.gz; do
    name=$(basename "$page")
    section=${name%.gz}
    section=${section##*.}
    for packager in deb rpm; do
      type=file
      [[ $packager == rpm ]] && type=doc
      printf '  - src: %s\n    dst: /usr/share/man/man%s/%s\n    type: %s\n    packager: %s\n    file_info: {mode: 0644}\n' \
        "$page" "$section" "$name" "$type" "$packager"
    done
  done
  printf 'license: %s\n' "$(cat "$STAGE/license.spdx")"
  printf 'changelog: %s\n' "$STAGE/changelog.yml"
} >"$STAGE/nfpm.yaml"

# One build per DIST: older fenced packages there are replaced.
rm -f "$dist"/fenced_*.deb "$dist"/fenced-*.rpm
for packager in deb rpm; do
  (cd "$here" && "$GO" run "$NFPM" package --config "$STAGE/nfpm.yaml" --packager "$packager" --target "$dist/")
done
ls "$dist"/fenced_*.deb "$dist"/fenced-*.rpm
