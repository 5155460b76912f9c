#!/usr/bin/env bash
# Builds helm from source through the Go module proxy into a cache keyed by
# version: ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/helm/<version>/helm.
# Idempotent: a complete cache (stamp file present) is reused as is.
# Prints the helm binary's path on stdout as its last line.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.19.2}"
cache="${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/helm/${HELM_VERSION}"
GO="${GO:-go}"
if ! command -v "$GO" >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi

if [ -x "$cache/helm" ] && [ -f "$cache/.complete" ]; then
	echo "$cache/helm"
	exit 0
fi
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "gpuslice: building helm ${HELM_VERSION} into $cache (cold: a few minutes)" >&2
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.metadata="
GOBIN="$tmp" GOFLAGS= CGO_ENABLED=0 "$GO" install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
mv -f "$tmp/helm" "$cache/helm"
touch "$cache/.complete"
echo "$cache/helm"
