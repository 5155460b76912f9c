#!/usr/bin/env bash
# Times the README's first command, `scripts/deps.sh && make demo`, as on a fresh machine: a clean
# clone of HEAD with empty GOCACHE and GOMODCACHE (modules come from the Go module proxy, every
# package is compiled). The packages scripts/deps.sh installs with apt are whatever this machine
# has. Prints the wall time, the CPU time of the command and its children (user + sys, which load
# from other processes changes little) and the load average around it. make demo-cold runs it.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-demo-cold.XXXXXX")"
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/src"
mkdir -p "$work/gocache" "$work/gomod"
export GOCACHE="$work/gocache" GOMODCACHE="$work/gomod" GOFLAGS=-modcacherw
before="$(cut -d' ' -f1-3 /proc/loadavg)"
cd "$work/src"
/usr/bin/time -f '%e %U %S' -o "$work/time" bash -c 'scripts/deps.sh && make demo' >"$work/log" 2>&1 ||
	{ tail -n 30 "$work/log"; echo "demo-cold: the command failed"; exit 1; }
after="$(cut -d' ' -f1-3 /proc/loadavg)"
read -r wall user sys <"$work/time"
tail -n 3 "$work/log"
echo "demo-cold: $(git rev-parse --short HEAD): wall ${wall} s, CPU ${user} s user + ${sys} s sys; load average before ${before}, after ${after} ($(nproc) CPUs)"
