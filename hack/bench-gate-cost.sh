#!/usr/bin/env bash
# make bench-gate-cost: the launch gate's cost with the grant held, libgpuslice of BASE (built from git, as
# make test-upgrade does) and of this tree side by side in one run: RUNS times, old then new, this tree's
# gs-bench-hooks with each library under the same two daemons (apps/bench_hooks.sh's default-gate rows):
# cuLaunchKernel per call and per 1,024 launches (1 s slices), the launch-bound workload and the
# shortest-kernel stream (10 ms slices, alone on the GPU). Ratios are hooked over direct in one process.
#   hack/bench-gate-cost.sh [BASE [RUNS]]
set -euo pipefail
base=${1:-cdf3182}
runs=${2:-3}
new=$(pwd)
old=$new/build/bench/gate-$base
if [ ! -f "$old/bin/libgpuslice.so" ]; then
	rm -rf "$old" && mkdir -p "$old" && git archive "$base" | tar -x -C "$old"
	make -s -C "$old" bin/libgpuslice.so >/dev/null
fi
make -s bin/gpuslice bin/libgpuslice.so bin/gs-bench-hooks bin/sim/libcuda.so.1 bin/sim/libnvidia-ml.so.1 >/dev/null
bin=$new/bin
# shellcheck source=apps/bench_daemons.sh
. apps/bench_daemons.sh
export LD_LIBRARY_PATH=$bin/sim
daemon long --default-slice 1s
daemon std
echo "bench-gate-cost: old=$base new=$(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty), $runs runs, load $(cut -d' ' -f1-3 /proc/loadavg)"
ratio() { # output, line pattern: the ratio of medians on gs-bench-hooks' line matching it
	grep -E "$2" <<<"$1" | sed -n 's/.* ratio \([0-9.]*\) .*/\1/p' | head -1
}
through() { # output, line start: a workload's median throughput ratio
	grep "^$2" <<<"$1" | sed -n 's/.*per round) \([0-9.]*\)$/\1/p' | head -1
}
for run in $(seq "$runs"); do
	for which in old new; do
		lib=$old/bin/libgpuslice.so
		[ "$which" = new ] && lib=$bin/libgpuslice.so
		calls=$(GPUSLICE_NODE_SOCKET=$tmp/long.sock "$bin/gs-bench-hooks" "$lib" 2000 0 2>&1)
		work=$(GPUSLICE_NODE_SOCKET=$tmp/std.sock "$bin/gs-bench-hooks" "$lib" 0 31 2>&1)
		added=$(grep -E '^cuLaunchKernel +direct' <<<"$calls" |
			sed -n 's/^cuLaunchKernel *direct *\([0-9.]*\) ns *hooked *\([0-9.]*\) ns.*/\1 -> \2 ns/p')
		echo "run $run $which: launch x$(ratio "$calls" '^cuLaunchKernel +direct') ($added)," \
			"per 1,024 launches x$(ratio "$calls" '^cuLaunchKernel per 1,024')," \
			"launch-bound throughput x$(through "$work" 'launch-bound workload')," \
			"shortest-kernel stream x$(through "$work" 'shortest-kernel stream')"
	done
done
echo "bench-gate-cost: done, load $(cut -d' ' -f1-3 /proc/loadavg)"
