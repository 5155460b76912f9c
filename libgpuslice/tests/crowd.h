/* SPDX-License-Identifier: Apache-2.0
 * crowd_test (the orchestrator) and crowd_child.c (its members): many
 * processes of one group at once, outside the library's own test harness. */
#ifndef GS_TEST_CROWD_H
#define GS_TEST_CROWD_H

#include <stdint.h>
#include <time.h>

#define CROWD_PATHS 5 /* plain, pitch, async, VMM, context */

static inline uint64_t crowd_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void crowd_sleep_until(uint64_t t)
{
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull), .tv_nsec = (long)(t % 1000000000ull)};
	while (t > crowd_now_ns() && clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) != 0)
		;
}

int crowd_job(void);
int crowd_stress(void);
int crowd_ctxcost(void);

#endif /* GS_TEST_CROWD_H */
