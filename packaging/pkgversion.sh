#!/usr/bin/env bash
# Turns a `git describe --tags --always --dirty` string into a version that
# dpkg and rpm both accept and order correctly:
#   v1.2.3                 -> 1.2.3
#   v1.2.3-rc1             -> 1.2.3~rc1            (before 1.2.3)
#   v1.2.3-4-gabc1234      -> 1.2.3+git4.abc1234   (after 1.2.3)
#   abc1234[-dirty]        -> 0.1.0~git<commit time>.abc1234[.dirty]
#   0.1.0-dev              -> 0.1.0~dev
# The commit time (UTC, YYYYMMDDhhmmss) makes untagged builds sort in commit
# order; it comes from git, or from SOURCE_DATE_EPOCH when git cannot tell.
set -euo pipefail
d=${1:?usage: pkgversion.sh GIT-DESCRIBE}
dirty=""
if [[ $d == *-dirty ]]; then
  dirty=.dirty
  d=${d%-dirty}
fi
# Anything but letters, digits and dots becomes a dot: both formats accept
# those, and "-" would split the Debian revision.
clean() { printf '%s' "$1" | tr -c 'A-Za-z0-9.' '.'; }
semver='^v?([0-9]+\.[0-9]+\.[0-9]+)'
if [[ $d =~ ${semver}-([0-9]+)-g([0-9a-f]+)$ ]]; then
  echo "${BASH_REMATCH[1]}+git${BASH_REMATCH[2]}.${BASH_REMATCH[3]}${dirty}"
elif [[ $d =~ ${semver}$ ]]; then
  echo "${BASH_REMATCH[1]}${dirty:++${dirty#.}}"
elif [[ $d =~ ${semver}-(.+)$ ]]; then
  echo "${BASH_REMATCH[1]}~$(clean "${BASH_REMATCH[2]}")${dirty}"
elif [[ $d =~ ^[0-9a-f]{4,40}$ ]]; then
  when=""
  if ct=$(git show -s --format=%ct "$d" 2>/dev/null); then
    when=$ct
  elif [[ -n ${SOURCE_DATE_EPOCH:-} ]]; then
    when=$SOURCE_DATE_EPOCH
  fi
  if [[ -n $when ]]; then
    when=$(date -u -d "@$when" +%Y%m%d%H%M%S)
  fi
  echo "0.1.0~git${when}${when:+.}${d}${dirty}"
else
  echo "0.0.0~$(clean "$d")${dirty}"
fi
