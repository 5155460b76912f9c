#!/usr/bin/env bash
# Builds the real Kubernetes binaries gpuslice tests against, from source
# through the Go module proxy, into a cache keyed by version:
#   ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/k8s/<version>/{kube-apiserver,kube-scheduler,kubectl,etcd,kwok}
# Idempotent: a complete cache (stamp file present) is reused as is.
# Prints the cache directory on stdout as its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The version is named in hack/k8s/version only (this module's go.mod pins the same one).
K8S_VERSION="$(cat "$here/version")"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
cache="${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/k8s/${K8S_VERSION}"
stamp="$cache/.complete-kwok-${KWOK_VERSION}"
GO="${GO:-go}"
if ! command -v "$GO" >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi

# KWOK's stage files (node initialization, pod ready and delete) from its
# module, concatenated into one --config file.
stages() {
	[ -f "$cache/kwok-stages.yaml" ] && return 0
	local dir
	dir="$(cd "$here" && GOFLAGS= "$GO" mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	local s="$dir/kustomize/stage"
	{
		for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml; do
			echo "---"
			cat "$s/$f"
		done
	} > "$cache/kwok-stages.yaml.tmp"
	mv "$cache/kwok-stages.yaml.tmp" "$cache/kwok-stages.yaml"
}

if [ -f "$stamp" ]; then
	stages
	echo "$cache"
	exit 0
fi
mkdir -p "$cache"
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION}"

echo "gpuslice: building kube-apiserver, kube-scheduler, kubectl, etcd ${K8S_VERSION} into $cache (cold: ~5-8 min on 2 idle cores)" >&2
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# One binary at a time, each line saying how far the build is (the packages they share are
# compiled once: the later ones mostly link).
start=$SECONDS
i=0
for pkg in k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
	k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3; do
	i=$((i + 1))
	name="${pkg##*/}"; [ "$name" = v3 ] && name=etcd
	echo "gpuslice: [$i/5] $name ..." >&2
	(cd "$here" && GOFLAGS=-mod=mod "$GO" build -trimpath -ldflags "$ldflags" -o "$tmp/$name" "$pkg")
	echo "gpuslice: [$i/5] $name built ($((SECONDS - start)) s so far)" >&2
done
echo "gpuslice: [5/5] kwok ${KWOK_VERSION} ..." >&2
GOBIN="$tmp" GOFLAGS= "$GO" install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
echo "gpuslice: [5/5] kwok built ($((SECONDS - start)) s in all)" >&2
for b in kube-apiserver kube-scheduler kubectl etcd kwok; do mv -f "$tmp/$b" "$cache/$b"; done
stages
touch "$stamp"
echo "$cache"
