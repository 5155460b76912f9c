/* SPDX-License-Identifier: Apache-2.0
 *
 * Launch gate: every kernel/graph launch hook calls gs_gate_launch(stream)
 * before forwarding to the driver. A launch passes at once while the process
 * holds an unexpired grant from the node daemon (fast path: one relaxed atomic
 * load and a clock read, no round trip), or while it runs ungated (gate off:
 * one load and a branch). Otherwise gs_gate_slow (gate.c) hands the GPU over at
 * the end of a slice and asks for the next grant. A non-zero CUresult is
 * returned to the caller instead of launching. See docs/node.md.
 */
#ifndef GS_GATE_H
#define GS_GATE_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include <gpuslice/cuda_abi.h>

#include "internal.h"

/* GS_GATE_OPEN in `until`: ungated for good (GPUSLICE_GATE=off). */
#define GS_GATE_OPEN UINT64_MAX
/* mode: ungated for now; holding a grant (note the launch time); and also
 * bounding outstanding launches (gs_gate_track). */
enum { GS_GATE_MODE_FREE = 0, GS_GATE_MODE_HELD = 1, GS_GATE_MODE_TRACK = 2 };

struct gs_gate_fast {
	_Atomic uint64_t until; /* CLOCK_MONOTONIC ns until which launches pass; 0: ask */
	_Atomic uint64_t last;  /* CLOCK_MONOTONIC ns of the last launch under a grant */
	_Atomic int mode;       /* GS_GATE_MODE_*: what a launch under `until` records */
};
GS_HIDDEN extern struct gs_gate_fast gs_gate_fast;
GS_HIDDEN CUresult gs_gate_slow(CUstream stream);
GS_HIDDEN void gs_gate_track(CUstream stream);

static inline uint64_t gs_gate_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline CUresult gs_gate_launch(CUstream stream)
{
	uint64_t until = atomic_load_explicit(&gs_gate_fast.until, memory_order_relaxed);
	if (until == GS_GATE_OPEN)
		return CUDA_SUCCESS;
	uint64_t now = gs_gate_now();
	if (GS_UNLIKELY(now >= until))
		return gs_gate_slow(stream);
	int mode = atomic_load_explicit(&gs_gate_fast.mode, memory_order_relaxed);
	if (mode != GS_GATE_MODE_FREE) {
		atomic_store_explicit(&gs_gate_fast.last, now, memory_order_relaxed);
		if (mode == GS_GATE_MODE_TRACK)
			gs_gate_track(stream);
	}
	return CUDA_SUCCESS;
}

#endif /* GS_GATE_H */
