# shellcheck shell=bash
# Sourced by apps/bench_hooks.sh and hack/bench-gate-cost.sh: a scratch directory, the simulator's state
# in it, and node daemons started there (stopped, and the directory removed, on exit). Needs $bin (the
# directory of gpuslice).
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
export GPUSLICE_SIM_STATE=$tmp/sim.state

daemon() { # name, flags...: a node daemon at $tmp/name.sock
	local name=$1
	shift
	"$bin/gpuslice" node --socket "$tmp/$name.sock" --run-dir "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 500); do [ -S "$tmp/$name.sock" ] && return 0; sleep 0.01; done
	echo "$(basename "$0"): the node daemon did not start:"
	cat "$tmp/$name.log"
	exit 1
}
