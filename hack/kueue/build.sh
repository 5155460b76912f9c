#!/usr/bin/env bash
# Builds Kueue's controller manager from source through the Go module proxy, in
# Kueue's own module (its go.mod and go.sum as released: nothing of it is added
# to gpuslice's go.mod), and copies its CRDs from the same module source, into a
# cache keyed by version:
#   ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/kueue/<version>/{kueue-manager,crds/*.yaml}
# The version is named in hack/kueue/version only. Idempotent: a complete cache
# (stamp file present) is reused as is. Prints the cache directory as its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUEUE_VERSION="$(cat "$here/version")"
cache="${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/kueue/${KUEUE_VERSION}"
stamp="$cache/.complete"
GO="${GO:-go}"
if ! command -v "$GO" >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi

if [ -x "$cache/kueue-manager" ] && [ -d "$cache/crds" ] && [ -f "$stamp" ]; then
	echo "$cache"
	exit 0
fi
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# The module's source (read-only in the module cache); downloaded outside any
# module so that no go.mod of ours is read or changed.
dir="$(cd "$tmp" && GOFLAGS= "$GO" mod download -json "sigs.k8s.io/kueue@${KUEUE_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [ -z "$dir" ] || [ ! -f "$dir/go.mod" ]; then
	echo "gpuslice: sigs.k8s.io/kueue@${KUEUE_VERSION}: module source not found" >&2
	exit 1
fi
echo "gpuslice: building kueue ${KUEUE_VERSION} into $cache (cold: ~10 min on 2 idle cores)" >&2
ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${KUEUE_VERSION}"
# Its own go.mod and go.sum, as released (-mod=readonly: nothing is resolved anew).
(cd "$dir" && GOFLAGS=-mod=readonly nice -n 10 "$GO" build -trimpath -ldflags "$ldflags" -o "$tmp/kueue-manager" ./cmd/kueue)
echo "gpuslice: kueue ${KUEUE_VERSION} built in ${SECONDS} s" >&2
mkdir -p "$tmp/crds"
cp "$dir"/config/components/crd/bases/*.yaml "$tmp/crds/"
chmod 0644 "$tmp"/crds/*.yaml
rm -rf "$cache/crds"
mv -f "$tmp/crds" "$cache/crds"
mv -f "$tmp/kueue-manager" "$cache/kueue-manager"
touch "$stamp"
echo "$cache"
