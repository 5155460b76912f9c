#!/usr/bin/env bash
# Builds containerd 1.7 (containerd, containerd-shim-runc-v2, ctr) from source
# through the Go module proxy for the DRA node e2e (make e2e-dra): Debian's
# containerd 1.6 has no CDI support, and the kubelet hands a DRA driver's
# devices to the runtime as CDI device names, which containerd 1.7 resolves
# with `enable_cdi = true` in its CRI plugin. Cached by version:
# ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/containerd/<version>/{containerd,containerd-shim-runc-v2,ctr}.
# Idempotent; prints the cache directory as its last line.
set -euo pipefail

CONTAINERD_VERSION="${CONTAINERD_VERSION:-v1.7.35}"
cache="${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/containerd/${CONTAINERD_VERSION}"
GO="${GO:-go}"
if ! command -v "$GO" >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
if [ -f "$cache/.complete" ]; then
	echo "$cache"
	exit 0
fi
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "gpuslice: building containerd ${CONTAINERD_VERSION} into $cache (cold: a few minutes)" >&2
# containerd's go.mod has exclude directives, so `go install pkg@version` refuses
# it: build inside a scratch copy of the module (from the module cache), as
# the main module.
src="$(cd "$tmp" && GOFLAGS= "$GO" mod download -json "github.com/containerd/containerd@${CONTAINERD_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
cp -r "$src" "$tmp/src"
chmod -R u+w "$tmp/src"
ldflags="-s -w -X github.com/containerd/containerd/version.Version=${CONTAINERD_VERSION}"
for cmd in containerd containerd-shim-runc-v2 ctr; do
	# The shim is static and without cgo, as containerd's own release builds it.
	cgo=1; [ "$cmd" = containerd-shim-runc-v2 ] && cgo=0
	(cd "$tmp/src" && CGO_ENABLED=$cgo GOFLAGS=-mod=mod "$GO" build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
		-ldflags "$ldflags" -o "$tmp/$cmd" "./cmd/${cmd}")
done
for cmd in containerd containerd-shim-runc-v2 ctr; do mv -f "$tmp/$cmd" "$cache/$cmd"; done
touch "$cache/.complete"
echo "gpuslice: containerd ${CONTAINERD_VERSION} built in ${SECONDS} s" >&2
echo "$cache"
