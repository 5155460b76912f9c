/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <sched.h>
#include <time.h>

#include "quiet.h"

#define GS_QUIET_WAIT_NS (500 * 1000 * 1000ll) /* a hold waits at most this long */

GS_HIDDEN struct gs_quiet gs_quiet;

GS_HIDDEN void gs_quiet_wait(void)
{
	int saved = errno;
	while (atomic_load(&gs_quiet.hold)) {
		atomic_fetch_sub(&gs_quiet.inside, 1);
		while (atomic_load(&gs_quiet.hold))
			sched_yield();
		atomic_fetch_add(&gs_quiet.inside, 1);
	}
	errno = saved;
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

GS_HIDDEN int gs_quiet_hold(int mine)
{
	int saved = errno;
	atomic_store(&gs_quiet.hold, 1);
	int64_t until = 0;
	int quiet = 1;
	while (atomic_load(&gs_quiet.inside) > mine) {
		int64_t t = now_ns();
		if (until == 0)
			until = t + GS_QUIET_WAIT_NS;
		else if (t > until) {
			quiet = 0;
			break;
		}
		sched_yield();
	}
	errno = saved;
	return quiet;
}

GS_HIDDEN void gs_quiet_release(void)
{
	atomic_store(&gs_quiet.hold, 0);
}

GS_HIDDEN void gs_quiet_forked(int mine)
{
	atomic_store(&gs_quiet.inside, mine);
	atomic_store(&gs_quiet.hold, 0);
}
