#!/usr/bin/env bash
# Builds the real kubelet the node e2e runs (or, with an argument, another node
# or cluster binary: `build-kubelet.sh kube-controller-manager` for the helm
# e2e), from source through the Go module proxy, with the same pinned
# dependencies as hack/k8s (its go.mod/go.sum are copied into a scratch module;
# nothing in the tree is modified). Cached by version:
# ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/k8s/<version>/node/<binary>.
# Idempotent; prints the cache directory as its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
k8s="$here/../../hack/k8s"
K8S_VERSION="$(cat "$k8s/version")"
cache="${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/k8s/${K8S_VERSION}/node"
GO="${GO:-go}"
bin="${1:-kubelet}"
case "$bin" in
kubelet) stamp=.complete ;;
kube-controller-manager) stamp=.complete-$bin ;;
*) echo "build-kubelet.sh: unknown binary $bin (kubelet, kube-controller-manager)" >&2; exit 2 ;;
esac
if ! command -v "$GO" >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi

if [ -x "$cache/$bin" ] && [ -f "$cache/$stamp" ]; then
	echo "$cache"
	exit 0
fi
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cp "$k8s/go.mod" "$k8s/go.sum" "$tmp/"
sed -i 's|^module .*|module gpuslice.local/kubelet-build|' "$tmp/go.mod"
cat > "$tmp/tools.go" <<GO
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/$bin"
GO
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION}"
echo "gpuslice: building $bin ${K8S_VERSION} into $cache (cold: a few minutes)" >&2
(cd "$tmp" && GOFLAGS=-mod=mod "$GO" build -trimpath -ldflags "$ldflags" -o "$tmp/$bin" "k8s.io/kubernetes/cmd/$bin")
echo "gpuslice: $bin ${K8S_VERSION} built in ${SECONDS} s" >&2
mv -f "$tmp/$bin" "$cache/$bin"
touch "$cache/$stamp"
echo "$cache"
