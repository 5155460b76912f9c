/* SPDX-License-Identifier: Apache-2.0
 *
 * Quiet points of this process's memory bookkeeping. Between an allocation
 * hook's reservation and the driver's answer, or between the driver's free
 * and the hook's uncount, the group's count and what the driver holds for the
 * process differ by that allocation. A measurement that compares the two
 * (drvmem.c: what a context or module load took) must not see such a moment,
 * or it would charge (or miss) another thread's allocation.
 *
 * Every hook that makes the driver take or give back memory runs as one
 * window (GS_QUIET_WINDOW at its top; windows never nest). A measurement
 * holds new windows off and waits until no other thread is in one, for a
 * bounded time, and keeps holding them off until the measured call returns.
 * The hot path pays two atomic additions on a process-wide line; it waits
 * only while a measurement holds, which context creation and module loads do
 * (not allocations).
 */
#ifndef GS_QUIET_H
#define GS_QUIET_H

#include <stdatomic.h>
#include <stdint.h>

#include "internal.h"

struct gs_quiet {
	_Atomic int64_t inside; /* threads in a window */
	_Atomic int hold;       /* a measurement holds new windows off */
};
GS_HIDDEN extern struct gs_quiet gs_quiet;

/* A window seeing the hold steps out until it ends (bounded by the holder). */
GS_HIDDEN void gs_quiet_wait(void);

static inline int gs_quiet_enter(void)
{
	atomic_fetch_add(&gs_quiet.inside, 1);
	if (GS_UNLIKELY(atomic_load(&gs_quiet.hold)))
		gs_quiet_wait();
	return 0;
}

static inline void gs_quiet_leave(int *unused)
{
	(void)unused;
	atomic_fetch_sub(&gs_quiet.inside, 1);
}

/* Runs the rest of the enclosing block as a window. */
#define GS_QUIET_WINDOW                                                                \
	__attribute__((cleanup(gs_quiet_leave))) int gs_quiet_win_ = gs_quiet_enter(); \
	(void)gs_quiet_win_

/* Holds new windows off until no thread but `mine` (the caller's own
 * windows: 0 or 1) is in one: 1, or 0 when that took too long (the figures
 * then may disagree by what is in flight). Every hold ends with
 * gs_quiet_release. Callers serialize (drvmem's measuring lock). */
GS_HIDDEN int gs_quiet_hold(int mine);
GS_HIDDEN void gs_quiet_release(void);
/* In a forked child: the parent's other threads are gone. */
GS_HIDDEN void gs_quiet_forked(int mine);

#endif /* GS_QUIET_H */
