#!/usr/bin/env bash
# release-check.sh: `make release` must be reproducible. It builds the
# release twice, from this tree and from a copy of it in another directory
# (its files as git lists them, uncommitted changes included), with the
# same VERSION, REVISION and SOURCE_DATE_EPOCH, compares the two
# SHA256SUMS, and checks that no archive names the directory it was built
# in. Exit 1 on any difference.
set -euo pipefail
cd "$(dirname "$0")/.."
export VERSION=${VERSION:-v$(sed -n 's/^## \[\([0-9][0-9.]*\)\] - .*/\1/p' CHANGELOG.md | head -1)}
export REVISION=${REVISION:-$(git rev-parse HEAD)}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

scripts/release.sh "$tmp/a" >/dev/null
mkdir "$tmp/src"
git ls-files -z --cached --others --exclude-standard | grep -zv '^testdata/jsclient/node_modules' |
  xargs -0 tar -cf - --no-recursion | tar -xf - -C "$tmp/src"
(cd "$tmp/src" && scripts/release.sh "$tmp/b" >/dev/null)

if ! diff "$tmp/a/SHA256SUMS" "$tmp/b/SHA256SUMS"; then
  echo "release-check: two builds of the same source differ" >&2
  exit 1
fi
for f in "$tmp"/a/*.tar.gz; do
  if tar -xzOf "$f" | grep -aq -e "$PWD" -e "$tmp/src"; then
    echo "release-check: $(basename "$f") names a build directory" >&2
    exit 1
  fi
done
cat "$tmp/a/SHA256SUMS"
echo "release-check: two builds from $PWD and $tmp/src give the same SHA256SUMS"
