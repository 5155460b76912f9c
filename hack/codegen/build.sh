#!/usr/bin/env bash
# Builds the API code generators from source through the Go module proxy into a cache keyed
# by version: ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/codegen/<controller-tools>-<code-generator>/
# holds controller-gen (CRDs, deep copies) and client-gen, lister-gen, informer-gen
# (the typed GPUNode clientset, listers and informers under pkg/generated).
# Idempotent: a complete cache (stamp file present) is reused as is. `make generate` and
# `make verify-generate` run it. Prints the cache directory on stdout as its last line.
set -euo pipefail

# controller-tools v0.23.0 is built on Kubernetes 0.37; the code generators are the staging
# module of the Kubernetes version named in hack/k8s/version (v1.X.Y -> k8s.io/code-generator v0.X.Y).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
k8s_version="$(cat "$here/../k8s/version")"
CONTROLLER_TOOLS_VERSION="${CONTROLLER_TOOLS_VERSION:-v0.23.0}"
CODE_GENERATOR_VERSION="${CODE_GENERATOR_VERSION:-v0.${k8s_version#v1.}}"
cache="${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/codegen/${CONTROLLER_TOOLS_VERSION}-${CODE_GENERATOR_VERSION}"
GO="${GO:-go}"
if ! command -v "$GO" >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi

if [ -f "$cache/.complete" ]; then
	echo "$cache"
	exit 0
fi
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "gpuslice: building controller-gen ${CONTROLLER_TOOLS_VERSION} and client/lister/informer-gen ${CODE_GENERATOR_VERSION} into $cache" >&2
GOBIN="$tmp" GOFLAGS= CGO_ENABLED=0 "$GO" install -trimpath \
	"sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_TOOLS_VERSION}"
GOBIN="$tmp" GOFLAGS= CGO_ENABLED=0 "$GO" install -trimpath \
	"k8s.io/code-generator/cmd/client-gen@${CODE_GENERATOR_VERSION}" \
	"k8s.io/code-generator/cmd/lister-gen@${CODE_GENERATOR_VERSION}" \
	"k8s.io/code-generator/cmd/informer-gen@${CODE_GENERATOR_VERSION}"
for b in controller-gen client-gen lister-gen informer-gen; do mv -f "$tmp/$b" "$cache/$b"; done
touch "$cache/.complete"
echo "$cache"
