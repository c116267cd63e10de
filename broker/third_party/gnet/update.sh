#!/usr/bin/env bash
# Re-creates this folder from gnet VERSION in the Go module cache (README.md,
# "Updating gnet"): its non-test .go files, go.mod and LICENSE, less the files
# no Linux build compiles, with haraqa.patch applied. README.md, haraqa.patch
# and this script are kept. The folder is replaced only if every step worked.
# Usage: bash broker/third_party/gnet/update.sh v2.9.7
set -euo pipefail
GO=${GO:-go}
version=${1:?usage: update.sh VERSION (a gnet v2 version, such as v2.9.7)}
here=$(cd "$(dirname "$0")" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
command -v patch >/dev/null || { echo "update.sh: needs patch (Debian package patch)" >&2; exit 1; }

# Outside any module, so that the replace in haraqa's go.mod does not apply.
src=$(cd "$stage" && GOWORK=off GOFLAGS= "$GO" mod download -json "github.com/panjf2000/gnet/v2@$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[ -d "$src" ] || { echo "update.sh: go mod download gave no Dir for gnet $version" >&2; exit 1; }

# The files some Linux build compiles: those go list names under GOOS=linux,
# for any Linux GOARCH, with no build tags, each tag of upstream's
# //go:build lines alone, or all of them.
goos_goarch=$("$GO" tool dist list | tr '/' '\n' | sort -u)
tags=$(cd "$src" && find . -name '*.go' ! -name '*_test.go' -exec sed -n 's|^//go:build ||p' {} + |
  tr -c 'A-Za-z0-9_.\n' '\n' | sort -u | grep -vxF -e '' -e unix -e cgo -e gc -e gccgo -e ignore $(printf -- '-e %s ' $goos_goarch) |
  grep -v '^go1\.' || true)
tagsets=("" $tags "$(echo $tags | tr ' ' ',')")
list='{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .CgoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}'
keep="$stage/keep"
for arch in $("$GO" tool dist list | sed -n 's|^linux/||p'); do
  for t in "${tagsets[@]}"; do
    (cd "$src" && GOWORK=off GOFLAGS= GOOS=linux GOARCH=$arch "$GO" list -e -find -tags "$t" -f "$list" ./...)
  done
done | sed "s|^$src/||" | sort -u >"$keep"

tree="$stage/gnet"
mkdir "$tree"
(cd "$src" && cp go.mod LICENSE "$tree/" && while read -r f; do
  mkdir -p "$tree/$(dirname "$f")" && cp "$f" "$tree/$f"
done <"$keep")
chmod -R u+w,go-w "$tree"
cp "$here/README.md" "$here/haraqa.patch" "$here/update.sh" "$tree/"
(cd "$tree" && patch -p1 -s -f --no-backup-if-mismatch <haraqa.patch) || {
  echo "update.sh: haraqa.patch does not apply to gnet $version; re-derive it (README.md)" >&2
  exit 1
}

find "$here" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
cp -R "$tree/." "$here/"
echo "gnet $version in $here: $(find "$here" -name '*.go' | wc -l) files, $(find "$here" -name '*.go' -exec cat {} + | wc -l) lines of Go"
