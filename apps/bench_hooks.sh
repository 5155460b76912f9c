#!/usr/bin/env bash
# make bench-hooks: gs-bench-hooks in each state of the launch gate, on the simulated GPU (or the driver
# present): the gate off; no daemon; holding grants from a time-slice daemon started here, with an unbounded
# queue (GPUSLICE_GATE_QUEUE_US=0), the count bound (GPUSLICE_GATE_DEPTH=4) and the default gate (the queue
# bounded by time). Per-call costs are taken under a daemon with 1 s slices, so that a timed batch rarely
# contains a hand-over (the hand-overs' cost is in the workload and in make bench-node); the launch-bound
# workload and the shortest-kernel stream run under a daemon with the default 10 ms slices, alone on the GPU.
# The last line sums up the default gate.
#   bench_hooks.sh BIN_DIR [ROUNDS [WORK_ROUNDS]]
set -euo pipefail
bin=$(cd "$1" && pwd)
rounds=${2:-2000}
wrounds=${3:-31}
# shellcheck source=apps/bench_daemons.sh
. "$(dirname "$0")/bench_daemons.sh"

run() { # title, rounds, work rounds, env...
	local title=$1 r=$2 w=$3
	shift 3
	echo "== $title"
	env "$@" "$bin/gs-bench-hooks" "$bin/libgpuslice.so" "$r" "$w" 2>&1 | tee "$tmp/out"
}

daemon long --default-slice 1s
daemon std
run "gate off (GPUSLICE_GATE=off)" "$rounds" "$wrounds" GPUSLICE_GATE=off GPUSLICE_NODE_SOCKET="$tmp/none.sock"
run "no daemon (ungated)" "$rounds" "$wrounds" GPUSLICE_NODE_SOCKET="$tmp/none.sock" GPUSLICE_LOG=0
for state in "unbounded queue (GPUSLICE_GATE_QUEUE_US=0):GPUSLICE_GATE_QUEUE_US=0" \
	"count bound (GPUSLICE_GATE_DEPTH=4):GPUSLICE_GATE_DEPTH=4" "default gate (queue bounded by time):X=1"; do
	title=${state%%:*}
	run "grant held (1 s slices), $title" "$rounds" 0 GPUSLICE_NODE_SOCKET="$tmp/long.sock" "${state#*:}"
	read -r _ launch _ alloc _ _ _ <<<"$(tail -n 1 "$tmp/out")"
	run "grant held (10 ms slices), $title: launch-bound workload alone on the GPU" 0 "$wrounds" \
		GPUSLICE_NODE_SOCKET="$tmp/std.sock" "${state#*:}"
	read -r _ _ _ _ _ _ through _ _ shortest <<<"$(tail -n 1 "$tmp/out")"
done

# gpuslice run start-up: the wall time of `gpuslice run -- true` over `true`, medians of 15, with the
# daemon running, and when it starts one (a fresh run directory each time; that daemon is stopped after).
ns_now() { date +%s%N; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
startup() { # run dir or "fresh", command...
	local i t0 d dir=$1
	shift
	for i in $(seq 15); do
		d=$dir
		[ "$d" = fresh ] && d=$tmp/fresh-$i
		t0=$(ns_now)
		GPUSLICE_RUN_DIR=$d GPUSLICE_LOG=0 "$@" >/dev/null 2>&1 || true
		echo $((($(ns_now) - t0) / 1000))
	done | median
}
base=$(for i in $(seq 15); do t0=$(ns_now); /bin/true; echo $((($(ns_now) - t0) / 1000)); done | median)
GPUSLICE_RUN_DIR=$tmp/warm GPUSLICE_LOG=0 "$bin/gpuslice" run -- true >/dev/null 2>&1
warm=$(startup "$tmp/warm" "$bin/gpuslice" run -- true)
cold=$(startup fresh "$bin/gpuslice" run -- true)
# status.json names each daemon's pid: wait until every run directory has one (a daemon writes it within
# its first status refresh), then stop them (a daemon also stops when its run directory is removed).
for _ in $(seq 500); do
	missing=0
	for d in "$tmp"/warm "$tmp"/fresh-*; do [ -s "$d/status.json" ] || missing=1; done
	[ "$missing" = 0 ] && break
	sleep 0.01
done
for f in "$tmp"/warm/status.json "$tmp"/fresh-*/status.json; do
	p=$(sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' "$f" 2>/dev/null | head -1 || true)
	[ -n "$p" ] && kill "$p" 2>/dev/null || true
done
echo "gpuslice run start-up (true: $((base / 1000)).$(((base % 1000) / 100)) ms): $(((warm - base) / 1000)).$((((warm - base) % 1000) / 100)) ms added with the daemon running, $(((cold - base) / 1000)).$((((cold - base) % 1000) / 100)) ms when it starts one"
echo "launch $launch (default gate, grant held), launch-bound throughput $through, alloc+free $alloc, shortest-kernel stream $shortest"
