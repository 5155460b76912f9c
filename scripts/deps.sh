#!/usr/bin/env bash
# Installs what gpuslice needs to build and test on Debian 12 (idempotent).
# Go >= 1.25 must already be installed (/usr/local/go on our machines).
set -euo pipefail

need=(gcc make git libc6-dev pkg-config)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Extra packages a component declares (one per line) in scripts/deps.d/*.txt.
for f in "$(dirname "$0")"/deps.d/*.txt; do
  [ -e "$f" ] || continue
  while read -r p; do
    [ -n "$p" ] && [ "${p#\#}" = "$p" ] || continue
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done <"$f"
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
  if [ -x /usr/local/go/bin/go ]; then
    echo "deps: add /usr/local/go/bin to PATH" >&2
  else
    echo "deps: Go >= 1.25 is required (https://go.dev/doc/install)" >&2
  fi
  exit 1
fi
# Go tools are not built here: golangci-lint (make lint), the code generators (make generate,
# verify-generate), helm (make test-helm) and Kueue's controller manager (make e2e-kueue, kueue-bin;
# ~10 min cold) are built from source through the Go module proxy by the targets that use them,
# on first use, and cached by version under ~/.cache/gpuslice (hack/*/build.sh). The demo needs none.
echo "deps: ok ($(go version))"
