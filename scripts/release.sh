#!/usr/bin/env bash
# release.sh OUTDIR: the release archives of gradiopool (the binary, the
# licence, the README, the changelog, docs/*.md and the example
# configuration) for linux and darwin
# on amd64 and arm64, and their SHA256SUMS, built reproducibly: the same
# source gives the same bytes whatever the directory or the machine's
# clock (-trimpath, no VCS stamping by the go command, an empty build id,
# archive entries with fixed names, owners, order and mtimes, gzip without
# a name or time). `make release` runs it; `make release-check` runs it
# twice from two directories and compares the sums.
#
# VERSION defaults to the newest release of CHANGELOG.md (v0.9.0), so that
# the archives carry the version the changelog describes; REVISION to the
# commit; SOURCE_DATE_EPOCH (the archive mtimes) to the commit's time.
set -euo pipefail
umask 022
out=${1:?usage: release.sh OUTDIR}
cd "$(dirname "$0")/.."
GO=${GO:-go}

version=${VERSION:-v$(sed -n 's/^## \[\([0-9][0-9.]*\)\] - .*/\1/p' CHANGELOG.md | head -1)}
if [ "$version" = v ]; then
  echo "release: no release heading in CHANGELOG.md" >&2
  exit 1
fi
revision=${REVISION:-$(git rev-parse HEAD 2>/dev/null || true)}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
ldflags="-s -w -buildid= -X github.com/gradiopool/gradiopool/internal/version.stamped=${version} -X github.com/gradiopool/gradiopool/internal/version.stampedRevision=${revision}"

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
rm -f "$out"/gradiopool_*.tar.gz "$out"/SHA256SUMS

for target in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
  os=${target%/*} arch=${target#*/}
  name=gradiopool_${version}_${os}_${arch}
  dir=$stage/$name
  mkdir -p "$dir"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOFLAGS= "$GO" build -trimpath -buildvcs=false \
    -ldflags "$ldflags" -o "$dir/gradiopool" ./cmd/gradiopool
  cp LICENSE README.md CHANGELOG.md "$dir/"
  mkdir "$dir/configs" "$dir/docs"
  cp configs/gradiopool.example.yaml "$dir/configs/"
  cp docs/*.md "$dir/docs/" # the README's links into docs/ work in the archive
  chmod 0755 "$dir/gradiopool" "$dir/configs" "$dir/docs"
  chmod 0644 "$dir/LICENSE" "$dir/README.md" "$dir/CHANGELOG.md" "$dir/configs/"* "$dir/docs/"*
  tar --sort=name --format=ustar --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
    -C "$stage" -cf - "$name" | gzip -9 -n > "$out/$name.tar.gz"
  echo "release: $out/$name.tar.gz"
done
(cd "$out" && sha256sum gradiopool_*.tar.gz > SHA256SUMS)
echo "release: $out/SHA256SUMS ($version, revision ${revision:-unknown})"
