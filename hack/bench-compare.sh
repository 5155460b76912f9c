#!/usr/bin/env bash
# make bench-compare: the node's hot paths of an older release (BASE, default ba6fd52: before the groups
# manager, internal/groupstate and internal/identity) and of this tree, side by side in one run, old then new
# per benchmark: make bench-hooks (gate costs, launch-bound throughput, `gpuslice run` start-up) and
# bench-node's grant round trips (GrantRoundTrip, GrantC, GateLaunch; not its E2E share benchmarks, whose
# results are shares, not speed). The old tree is built from git (git archive BASE), as make test-upgrade does.
#   hack/bench-compare.sh [BASE]
set -euo pipefail
base=${1:-ba6fd52}
new=$(pwd)
old=$new/build/bench/$base
if [ ! -x "$old/bin/gpuslice" ] || [ ! -x "$old/build/node/gs-grantbench" ]; then
	rm -rf "$old" && mkdir -p "$old" && git archive "$base" | tar -x -C "$old"
	make -C "$old" VERSION="$base" bin/gpuslice bin/libgpuslice.so bin/gs-bench-hooks \
		bin/sim/libcuda.so.1 bin/sim/libnvidia-ml.so.1 build/node/gs-grantbench >/dev/null
fi
make bin/gpuslice bin/libgpuslice.so bin/gs-bench-hooks bin/sim/libcuda.so.1 bin/sim/libnvidia-ml.so.1 \
	build/node/gs-grantbench >/dev/null
echo "bench-compare: old=$base new=$(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty), load $(cut -d' ' -f1-3 /proc/loadavg)"
hooks() { # tree
	(cd "$1" && LD_LIBRARY_PATH="$1/bin/sim" apps/bench_hooks.sh bin 2000 31)
}
grants() { # tree
	# The daemon's benchmarks live in test/timeslice/e2e (build tag timeslicee2e) since issue 23, in
	# internal/timeslice before.
	local pkg=(./internal/timeslice/)
	[ -d "$1/test/timeslice/e2e" ] && pkg=(-tags timeslicee2e ./test/timeslice/e2e/)
	(cd "$1" && go test -run '^$' -bench 'GrantRoundTrip' -benchtime 1x "${pkg[@]}" 2>&1 &&
		GPUSLICE_BIN="$1/bin" GPUSLICE_NODE_GRANTBENCH="$1/build/node/gs-grantbench" \
			go test -run '^$' -bench 'GrantC|GateLaunch' -benchtime 1x "${pkg[@]}" 2>&1) |
		grep -E '^Benchmark|/s|ns/' | grep -v '^[IE][0-9]'
}
for what in hooks grants; do
	for tree in "$old" "$new"; do
		echo "== $what $([ "$tree" = "$new" ] && echo new || echo "old $base")"
		"$what" "$tree"
	done
done
echo "bench-compare: done, load $(cut -d' ' -f1-3 /proc/loadavg)"
