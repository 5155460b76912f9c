/* SPDX-License-Identifier: Apache-2.0
 *
 * Launch gate: every kernel/graph launch hook reads gs_gate_state() (under a
 * grant gs_gate_count(); when the launch may not go at once, gs_gate_resume(stream))
 * before forwarding to the driver. The fast path reads the gate's state with a
 * relaxed atomic load:
 *  - PASS (no daemon configured or reachable and GPUSLICE_GATE_ON_LOSS=run, or
 *    GPUSLICE_GATE=off): the launch goes at once; nothing else is read.
 *  - HELD (a grant is held, the default): the launch is counted (a relaxed load
 *    and store: the gate thread's idle check and the queue bound) and goes
 *    unless the count reached check_at: then gs_gate_check (gate_track.c, every
 *    few launches, never on the fast path) reads the clock, bounds the GPU time
 *    queued (it may wait there) and sets the next check_at. No clock read, no
 *    system call, no lock per launch. The gate thread turns the state to ASK
 *    when the grant ends or is revoked.
 *  - TRACK (GPUSLICE_GATE_DEPTH=N > 0): a count bound instead: an event per
 *    launch, the one N launches back waited for, the clock at every launch.
 *  - ASK: gs_gate_slow (gate.c) hands the GPU over at the end of a slice and
 *    asks for the next grant.
 * A non-zero CUresult is returned to the caller instead of launching. See
 * docs/timeslice.md.
 */
#ifndef GS_GATE_H
#define GS_GATE_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include <gpuslice/cuda_abi.h>

#include "internal.h"

/* gs_gate_fast.state: what a launch does. */
enum { GS_GATE_ASK = 0, GS_GATE_PASS = 1, GS_GATE_HELD = 2, GS_GATE_TRACK = 3 };
/* Under a grant, at most this many launches between two checks; up to
 * GS_GATE_CHECK_MAX while they hold under a quarter of the queue bound
 * (gate_track.c). */
#define GS_GATE_CHECK_EVERY 256u
#define GS_GATE_CHECK_MAX 1024u

struct gs_gate_fast {
	_Atomic int state; /* GS_GATE_* */
	_Atomic unsigned
		launches; /* launches under grants, counted without atomic RMW (approximate with several launching threads) */
	_Atomic unsigned check_at; /* HELD: the count at which the next launch runs gs_gate_check */
	_Atomic uint64_t end;      /* CLOCK_MONOTONIC ns: the held grant's end */
};
GS_HIDDEN extern struct gs_gate_fast gs_gate_fast;
GS_HIDDEN CUresult gs_gate_slow(CUstream stream);
/* HELD, every few launches: the grant's end, and the GPU time queued bounded. */
GS_HIDDEN CUresult gs_gate_check(CUstream stream, unsigned n);
GS_HIDDEN void gs_gate_track(CUstream stream);
/* TRACK: the clock checked at every launch (it makes driver calls anyway),
 * then gs_gate_track; past the grant's end, the slow path. */
GS_HIDDEN CUresult gs_gate_track_launch(CUstream stream);

static inline uint64_t gs_gate_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The fast path, inline in every launch hook (hooks_launch.c): the hook reads
 * gs_gate_fast.state once; HELD first, each state straight on to a tail call of
 * its own (a taken branch and a jump back cost the held launch ~3 ns on the
 * simulator's ~50 ns). HELD: gs_gate_count says 1 when the launch goes at once
 * (a relaxed load and store of the count, a compare with check_at). PASS goes
 * at once. Otherwise the hook calls gs_gate_resume out of line, so that its
 * own fast path calls nothing and ends in a tail call. */
static inline int gs_gate_state(void)
{
	return atomic_load_explicit(&gs_gate_fast.state, memory_order_relaxed);
}

static inline int gs_gate_count(void)
{
	unsigned n = atomic_load_explicit(&gs_gate_fast.launches, memory_order_relaxed) + 1;
	atomic_store_explicit(&gs_gate_fast.launches, n, memory_order_relaxed);
	return (int)(n - atomic_load_explicit(&gs_gate_fast.check_at, memory_order_relaxed)) < 0;
}

/* When the fast path did not let the launch go: HELD at a check (the launch
 * was counted), TRACK or ASK (counted there). A non-zero CUresult is returned instead of launching. */
GS_HIDDEN CUresult gs_gate_resume(CUstream stream);

#endif /* GS_GATE_H */
