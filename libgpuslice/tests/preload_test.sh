#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# LD_PRELOAD end to end: a program that knows nothing of gpuslice (it dlopens
# libcuda.so.1 like the CUDA runtime) sees the limit as its total memory and
# is refused at the limit, through dlsym and through cuGetProcAddress_v2.
# Without the library the same program sees the whole (simulated) card.
# Contexts take the simulator's default (300 MiB, as a real card's context
# takes a few hundred), and the library counts it against the limit.
# Usage: preload_test.sh PROBE LIB [PRELOAD_FIRST]   (LD_LIBRARY_PATH: the driver)
set -euo pipefail
probe=$1 lib=$2 first=${3:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export GPUSLICE_SIM_STATE=$dir/sim GPUSLICE_SIM_MEMORY=24GiB GPUSLICE_GROUP=probe
unset GPUSLICE_SIM_CONTEXT_MEMORY

# (24 GiB - 300 MiB) / 256 MiB = 94 blocks beside the context.
out=$("$probe" dlsym)
[[ $out == "total=25769803776 blocks=94 rc=2" ]] || { echo "FAIL without the library: $out"; exit 1; }

for mode in dlsym procaddr; do
	out=$(GPUSLICE_MEMORY_LIMIT=1073741824 GPUSLICE_GROUP_FILE=$dir/group-$mode \
		LD_PRELOAD="${first:+$first }$lib" "$probe" "$mode" 2>"$dir/err") || { cat "$dir/err"; exit 1; }
	# The context's 300 MiB counts: two 256 MiB blocks fit in the 1 GiB limit, not four.
	if [[ $out != "total=1073741824 blocks=2 rc=2" ]]; then
		echo "FAIL ($mode): $out"; cat "$dir/err"; exit 1
	fi
	if [[ $(grep -c . "$dir/err") != 1 ]] ||
		! grep -q '^gpuslice: allocation of 256.0 MiB refused on GPU-.*: group "probe" uses 812.0 MiB of its 1.0 GiB limit$' "$dir/err"; then
		echo "FAIL ($mode): expected one refusal line, got:"; cat "$dir/err"; exit 1
	fi
	echo "  preload $mode: $out"
done
