#!/usr/bin/env bash
# Builds golangci-lint from source through the Go module proxy into a cache keyed by
# version: ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/golangci-lint/<version>/golangci-lint.
# Idempotent: a complete cache (stamp file present) is reused as is. `make lint` (in make test)
# runs it on first use. Prints the binary's path on stdout as its last line.
set -euo pipefail

GOLANGCI_LINT_VERSION="${GOLANGCI_LINT_VERSION:-v2.15.0}"
cache="${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/golangci-lint/${GOLANGCI_LINT_VERSION}"
GO="${GO:-go}"
if ! command -v "$GO" >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi

if [ -x "$cache/golangci-lint" ] && [ -f "$cache/.complete" ]; then
	echo "$cache/golangci-lint"
	exit 0
fi
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "gpuslice: building golangci-lint ${GOLANGCI_LINT_VERSION} into $cache (cold: a few minutes)" >&2
GOBIN="$tmp" GOFLAGS= CGO_ENABLED=0 "$GO" install -trimpath \
	"github.com/golangci/golangci-lint/v2/cmd/golangci-lint@${GOLANGCI_LINT_VERSION}"
mv -f "$tmp/golangci-lint" "$cache/golangci-lint"
touch "$cache/.complete"
echo "$cache/golangci-lint"
